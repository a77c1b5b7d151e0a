"""Counting the holders of a key while they hold it (the pops in flight on an autopilot lane,
core/engine/autopilot.py; a tenant's parked pops, core/tenancy/limiter.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

Key = TypeVar("Key")


@contextmanager
def holding(counts: dict[Key, int], key: Key) -> Iterator[int]:
    """Count one more holder of `key` while the block runs; yields the count with it. A key
    nobody holds leaves `counts`, so the dict holds only what is held."""
    held = counts.get(key, 0) + 1
    counts[key] = held
    try:
        yield held
    finally:
        left = counts[key] - 1
        if left:
            counts[key] = left
        else:
            del counts[key]
