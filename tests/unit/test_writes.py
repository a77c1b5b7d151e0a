"""Pure helpers of the write path."""

from __future__ import annotations

import uuid

from core.writes import NewMessage, first_occurrences


def _items(*txids: str) -> list[NewMessage]:
    return [NewMessage(uuid.uuid4(), t, b"null") for t in txids]


def test_first_occurrences_points_every_repeat_at_the_first_item_with_its_id() -> None:
    assert first_occurrences(_items("a", "b", "a", "c", "b", "a")) == [0, 1, 0, 3, 1, 0]


def test_first_occurrences_of_unique_ids_is_the_identity() -> None:
    assert first_occurrences(_items("x", "y", "z")) == [0, 1, 2]


def test_first_occurrences_compares_ids_exactly() -> None:
    assert first_occurrences(_items("A", "a", "a ", "A")) == [0, 1, 2, 0]


def test_first_occurrences_of_nothing_is_empty() -> None:
    assert first_occurrences([]) == []
