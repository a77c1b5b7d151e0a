"""Keyset pages (core/pages.py)."""

from __future__ import annotations

from core.pages import KeyPage, key_page


def test_the_row_past_the_limit_marks_the_page_truncated_and_is_not_on_it() -> None:
    assert key_page(["a", "b", "c"], 2, str.upper) == KeyPage(["a", "b"], True, "B")


def test_a_page_that_holds_every_row_left_is_the_last() -> None:
    assert key_page(["a", "b"], 2, str.upper) == KeyPage(["a", "b"], False, None)
    assert key_page([], 2, str.upper) == KeyPage([], False, None)
