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
# UUID's slots written through their descriptors: object.__setattr__ looks the name up
# first and costs about twice as much.
_set_int = vars(uuid.UUID)["int"].__set__
_set_is_safe = vars(uuid.UUID)["is_safe"].__set__
_UNKNOWN_SAFETY = uuid.SafeUUID.unknown
_VERSION_7 = 0x7 << 76
_RFC_VARIANT = 0x2 << 62


def uuid_of_int(value: int) -> uuid.UUID:
    """uuid.UUID(int=value) without its argument parsing: every message is given an id, so
    this is on the path of every push and pop."""
    made = _new(uuid.UUID)
    _set_int(made, value)
    _set_is_safe(made, _UNKNOWN_SAFETY)
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


class _Monotone:
    """The last id's time and 74 random bits, so the next id of the same millisecond (or
    of a clock that stepped back) is the last one plus one."""

    millis = 0
    rand = 0


_last = _Monotone()
_RAND_BITS = 74
_RAND_B_MASK = (1 << 62) - 1


def uuid7() -> uuid.UUID:
    """A version-7 UUID: 48-bit big-endian Unix milliseconds, then 74 random bits.

    Ids minted in one process strictly increase (RFC 9562 §6.2, method 1: within one
    millisecond the random part counts up from a random start): the messages of one flush
    share their `createdAt`, and the official client's stream runner orders a partition's
    messages by (createdAt, id), so ids must follow offsets there. Uniqueness comes from the
    random bits; index inserts stay local.
    """
    millis = time.time_ns() // 1_000_000
    last = _last
    if millis > last.millis:
        rand = int.from_bytes(_entropy.take(10), "big") >> (80 - _RAND_BITS)
    else:
        millis, rand = last.millis, last.rand + 1
        if rand >> _RAND_BITS:  # 2^74 ids in one millisecond: borrow the next one
            millis, rand = millis + 1, 0
    last.millis, last.rand = millis, rand
    return uuid_of_int((millis & 0xFFFF_FFFF_FFFF) << 80 | _VERSION_7 | (rand >> 62) << 64
                       | _RFC_VARIANT | (rand & _RAND_B_MASK))


def uuid7s(count: int) -> list[uuid.UUID]:
    """`count` ids as `uuid7()` would mint them one after the other within one millisecond
    (each the last plus one), with one clock read and one draw of entropy: the ids of a
    push's messages."""
    if count <= 0:
        return []
    first = uuid7()  # the monotone rule for the first; the others count up from it
    last = _last
    if count == 1 or (last.rand + count - 1) >> _RAND_BITS:
        return [first, *(uuid7() for _ in range(count - 1))]  # a borrowed millisecond
    start = last.rand
    last.rand = start + count - 1
    if (start & _RAND_B_MASK) + count - 1 <= _RAND_B_MASK:
        # The random part's low 62 bits are the id's low bits: while they do not carry
        # into the 12 above the variant, counting the random part up counts the id up.
        base = first.int
        made = [first]
        add = made.append
        for value in range(base + 1, base + count):
            one = _new(uuid.UUID)
            _set_int(one, value)
            _set_is_safe(one, _UNKNOWN_SAFETY)
            add(one)
        return made
    head = (last.millis & 0xFFFF_FFFF_FFFF) << 80 | _VERSION_7 | _RFC_VARIANT
    return [first, *(uuid_of_int(head | (r >> 62) << 64 | (r & _RAND_B_MASK))
                     for r in range(start + 1, start + count))]
