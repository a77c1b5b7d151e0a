"""The fan-out cache (core/engine/fanout.py): a segment is decompressed once for the pops of
several groups within its window, never held past it, and never beyond the byte bound."""

from __future__ import annotations

import uuid

import pytest

from core import segments
from core.engine.fanout import SegmentCache


def _blob(n: int, size: int = 100) -> bytes:
    return segments.pack([segments.Frame(uuid.uuid4(), f"t{i}", b"x" * size)
                          for i in range(n)])


def test_a_segment_is_decompressed_once_within_its_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = segments.decompress
    monkeypatch.setattr(segments, "decompress", lambda b: calls.append(1) or real(b))
    now = [0.0]
    cache = SegmentCache(ttl=2.0, clock=lambda: now[0])
    blob = _blob(10)
    first = cache.raw(7, 0, 9, blob)
    for _ in range(15):  # fifteen more groups read it
        assert cache.raw(7, 0, 9, blob) is first
    assert len(calls) == 1 and (cache.hits, cache.misses) == (15, 1)
    assert [f.transaction_id for f in segments.iter_frames(first, 3, 4)] == ["t3", "t4"]
    now[0] = 2.5  # past the window: read again
    cache.raw(7, 0, 9, blob)
    assert len(calls) == 2
    assert cache.raw(8, 0, 9, blob) == first  # another partition is another segment


def test_the_cache_holds_no_more_than_its_byte_bound() -> None:
    blob = _blob(20, size=1000)
    size = len(segments.decompress(blob))
    cache = SegmentCache(max_bytes=size * 5, ttl=60)
    for base in range(0, 400, 20):
        cache.raw(1, base, base + 19, blob)
        assert cache.bytes <= size * 5
    assert cache.bytes == size * 5
    cache.raw(1, 380, 399, blob)  # the most recent is still held
    assert cache.hits == 1
    cache.raw(1, 0, 19, blob)  # the oldest was evicted
    assert cache.misses == 21
