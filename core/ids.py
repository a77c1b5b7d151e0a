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


def uuid7() -> uuid.UUID:
    """A version-7 UUID: 48-bit big-endian Unix milliseconds, then 74 random bits.

    Ids minted in one process sort by time at millisecond resolution, which keeps index
    inserts local; uniqueness comes from the random bits, not from a counter.
    """
    millis = time.time_ns() // 1_000_000
    value = (millis & 0xFFFF_FFFF_FFFF) << 80 | int.from_bytes(os.urandom(10), "big")
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return uuid.UUID(int=value)
