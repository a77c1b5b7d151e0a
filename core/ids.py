"""Identifier types and the UUIDv7 minter (message ids, lease ids)."""

from __future__ import annotations

import os
import time
import uuid
from typing import NewType

PartitionId = NewType("PartitionId", int)
QueueId = NewType("QueueId", int)
LeaseId = NewType("LeaseId", str)

NIL_UUID = "00000000-0000-0000-0000-000000000000"


_new = object.__new__
_set = object.__setattr__
_VERSION_7 = 0x7 << 76
_RFC_VARIANT = 0x2 << 62
_RANDOM_MASK = ((1 << 80) - 1) & ~(0xF << 76) & ~(0x3 << 62)


def uuid_of_int(value: int) -> uuid.UUID:
    """uuid.UUID(int=value) without its argument parsing: every message is given an id, so
    this is on the path of every push and pop."""
    made = _new(uuid.UUID)
    _set(made, "int", value)
    _set(made, "is_safe", uuid.SafeUUID.unknown)
    return made


class _Entropy:
    """os.urandom read a few kilobytes at a time: one system call per ~400 ids, not one
    per id."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._pool = b""
        self._pos = 0

    def take(self, n: int) -> bytes:
        if self._pos + n > len(self._pool):
            self._pool = os.urandom(self._size)
            self._pos = 0
        chunk = self._pool[self._pos:self._pos + n]
        self._pos += n
        return chunk


_entropy = _Entropy()


def uuid7() -> uuid.UUID:
    """A version-7 UUID: 48-bit big-endian Unix milliseconds, then 74 random bits.

    Ids minted in one process sort by time at millisecond resolution, which keeps index
    inserts local; uniqueness comes from the random bits, not from a counter.
    """
    millis = time.time_ns() // 1_000_000
    random_bits = int.from_bytes(_entropy.take(10), "big") & _RANDOM_MASK
    return uuid_of_int((millis & 0xFFFF_FFFF_FFFF) << 80 | random_bits | _VERSION_7
                       | _RFC_VARIANT)
