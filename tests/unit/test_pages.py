"""Pages of listings (core/pages.py): keyset pages, and pages by position cut by bytes."""

from __future__ import annotations

from core.pages import KeyPage, key_page, offset_page, within_bytes


def test_the_row_past_the_limit_marks_the_page_truncated_and_is_not_on_it() -> None:
    assert key_page(["a", "b", "c"], 2, str.upper) == KeyPage(["a", "b"], True, "B")


def test_a_page_that_holds_every_row_left_is_the_last() -> None:
    assert key_page(["a", "b"], 2, str.upper) == KeyPage(["a", "b"], False, None)
    assert key_page([], 2, str.upper) == KeyPage([], False, None)


def test_a_byte_budget_keeps_the_leading_rows_within_it_and_always_the_first() -> None:
    assert within_bytes([3, 4, 2, 1], lambda n: n, 9) == [3, 4, 2]
    assert within_bytes([30, 1], lambda n: n, 9) == [30]  # larger than the budget: alone
    assert within_bytes([], lambda n: n, 9) == []
    read: list[int] = []
    within_bytes((read.append(n) or n for n in [5, 5, 5, 5]), lambda n: n, 9)
    assert read == [5, 5]  # nothing read past the first row left out


def test_an_offset_page_cut_short_of_its_room_is_truncated() -> None:
    cut = offset_page(["a", "b"], 10, 4, 5)
    assert (cut.truncated, cut.next_offset, cut.total) == (True, 6, 10)
    assert not offset_page(["a", "b"], 6, 4, 2).truncated  # the last rows, all there
