"""Message ids minted in one process strictly increase, also within one millisecond: the
stream runner orders a partition's messages by (createdAt, id), and one flush's messages
share their createdAt (tests/integration/test_streams.py's gate test fails otherwise)."""

from __future__ import annotations

import pytest

from core import ids


def test_ids_of_one_millisecond_increase_and_keep_version_and_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids, "_last", ids._Monotone())  # ids minted earlier in this process
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_700_000_000_000 * 1_000_000)
    minted = [ids.uuid7() for _ in range(10_000)]
    assert minted == sorted(minted)
    assert len(set(minted)) == len(minted)
    assert {(u.version, u.variant) for u in minted} == {(7, "specified in RFC 4122")}
    assert {u.int >> 80 for u in minted} == {1_700_000_000_000}


def test_a_clock_stepping_back_does_not_break_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids, "_last", ids._Monotone())
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_800_000_000_000 * 1_000_000)
    first = ids.uuid7()
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_799_999_999_000 * 1_000_000)
    assert ids.uuid7() > first


def test_ids_minted_together_are_those_minted_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_700_000_000_000 * 1_000_000)
    monkeypatch.setattr(ids, "_entropy", _Replay(b"\x5a" * 10))
    monkeypatch.setattr(ids, "_last", ids._Monotone())
    together = ids.uuid7s(500)
    after_together = ids.uuid7()
    monkeypatch.setattr(ids, "_last", ids._Monotone())
    one_by_one = [ids.uuid7() for _ in range(500)]
    assert together == one_by_one
    assert after_together == ids.uuid7()  # the minter goes on from the last id handed out
    assert ids.uuid7s(0) == []


def test_ids_minted_together_borrow_the_next_millisecond_at_the_top(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids, "_last", ids._Monotone())
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_700_000_000_000 * 1_000_000)
    ids.uuid7()
    ids._last.rand = (1 << ids._RAND_BITS) - 3  # three ids left in this millisecond
    minted = ids.uuid7s(10)
    assert minted == sorted(minted) and len(set(minted)) == 10
    assert {u.int >> 80 for u in minted} == {1_700_000_000_000, 1_700_000_000_001}
    assert {(u.version, u.variant) for u in minted} == {(7, "specified in RFC 4122")}


class _Replay:
    """Entropy that answers the same bytes again (so two minters can be compared)."""

    def __init__(self, chunk: bytes) -> None:
        self.chunk = chunk

    def take(self, n: int) -> bytes:
        return self.chunk[:n]


def test_ids_minted_together_across_a_carry_of_the_low_random_bits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the random part's low 62 bits overflow into its upper 12 (which sit above the
    variant bits), the ids minted together are still those minted one by one."""
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_700_000_000_000 * 1_000_000)
    start = (5 << 62) | ((1 << 62) - 4)  # four ids before the low bits carry
    for minting in ("together", "one by one"):
        monkeypatch.setattr(ids, "_last", ids._Monotone())
        ids.uuid7()
        ids._last.rand = start - 1
        minted = ids.uuid7s(10) if minting == "together" else [ids.uuid7() for _ in range(10)]
        if minting == "together":
            together = minted
    assert together == minted == sorted(minted)
    assert {(u.int >> 64) & 0xFFF for u in minted} == {5, 6}  # the upper 12 bits carried
    assert {(u.version, u.variant) for u in minted} == {(7, "specified in RFC 4122")}
