"""core/holders.py: a key's holders are counted while they hold it, and a key nobody holds
is not kept."""

from __future__ import annotations

import pytest

from core.holders import holding


def test_each_holder_is_counted_and_the_last_to_leave_takes_the_key_out() -> None:
    counts: dict[str, int] = {}
    with holding(counts, "lane") as first:
        assert first == 1
        with holding(counts, "lane") as second, holding(counts, "other") as other:
            assert (second, other) == (2, 1)
            assert counts == {"lane": 2, "other": 1}
        assert counts == {"lane": 1}
    assert counts == {}


def test_a_holder_whose_block_raises_is_counted_out() -> None:
    counts: dict[str, int] = {"lane": 1}
    with pytest.raises(RuntimeError), holding(counts, "lane"):
        assert counts == {"lane": 2}
        raise RuntimeError("the pop failed")
    assert counts == {"lane": 1}
