"""A walk of a request's bytes along its schema, checking every declared length before kio
reads it.

kio's native reader reserves memory for an array from the count the request declares; a
count of two billion asks for hundreds of gigabytes, and a failed allocation in native code
aborts the whole process (the fuzzer of the port found it: tests/fuzz/kafka_frames.py). So
each array count, string and byte length is checked here against the bytes actually left
(every element takes at least one byte) before kio sees the request. What passes may still
be refused by kio for other reasons; what fails is closed as unreadable.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
)

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "uint16": 2, "uint32": 4,
          "int64": 8, "uint64": 8, "float64": 8, "uuid": 16, "timedelta_i32": 4,
          "timedelta_i64": 8, "datetime_i64": 8}
_VARIABLE = {"string", "bytes", "records"}


class TooShort(Exception):
    """A declared length runs past the request's bytes (or the schema is one not walked)."""


class _Cursor:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def left(self) -> int:
        return len(self.data) - self.pos

    def skip(self, n: int) -> None:
        if n < 0 or n > self.left():
            raise TooShort(f"{n} bytes declared, {self.left()} left")
        self.pos += n

    def signed(self, size: int) -> int:
        if size > self.left():
            raise TooShort("a length runs past the end")
        fmt = {2: ">h", 4: ">i"}[size]
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def uvarint(self) -> int:
        value = shift = 0
        for _ in range(10):
            if not self.left():
                raise TooShort("a varint runs past the end")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise TooShort("a varint longer than 10 bytes")


def check(schema: type[Any], data: bytes, offset: int) -> None:
    """Raise TooShort unless every length `data[offset:]` declares fits in it."""
    _entity(schema, _Cursor(data, offset), bool(schema.__flexible__))


def _entity(schema: type[Any], cur: _Cursor, flexible: bool) -> None:
    for field, kind, kafka_type in _fields(schema):
        if kind is None:
            continue  # a tagged field: it lives in the tagged section below
        if isinstance(kind, PrimitiveField):
            _primitive(kafka_type, cur, flexible)
        elif isinstance(kind, PrimitiveTupleField):
            for _ in range(_count(cur, flexible)):
                _primitive(kafka_type, cur, flexible)
        elif isinstance(kind, EntityTupleField):
            for _ in range(_count(cur, flexible)):
                _entity(kind.type_, cur, flexible)
        elif isinstance(kind, EntityField):
            _entity(kind.type_, cur, flexible)
        else:
            raise TooShort(f"field {field} is of a kind not walked")
    if flexible:
        for _ in range(_count(cur, True, nullable=False)):
            cur.uvarint()  # tag
            cur.skip(cur.uvarint())


_FIELDS: dict[type[Any], tuple[tuple[str, Any, str | None], ...]] = {}


def _fields(schema: type[Any]) -> tuple[tuple[str, Any, str | None], ...]:
    known = _FIELDS.get(schema)
    if known is not None:
        return known
    out = []
    for field in dataclasses.fields(schema):
        kind = None if get_field_tag(field) is not None else classify_field(field)
        out.append((field.name, kind, field.metadata.get("kafka_type")))
    _FIELDS[schema] = tuple(out)
    return _FIELDS[schema]


def _count(cur: _Cursor, flexible: bool, *, nullable: bool = True) -> int:
    """An array's element count, at most the bytes left (each element takes one at least)."""
    if flexible:
        n = cur.uvarint() - (1 if nullable else 0)
    else:
        n = cur.signed(4)
    if n < 0:
        return 0  # null
    if n > cur.left():
        raise TooShort(f"an array of {n} elements in {cur.left()} bytes")
    return n


def _primitive(kafka_type: str | None, cur: _Cursor, flexible: bool) -> None:
    if kafka_type in _FIXED:
        cur.skip(_FIXED[kafka_type])
    elif kafka_type in _VARIABLE:
        if flexible:
            n = cur.uvarint() - 1
        else:
            n = cur.signed(2 if kafka_type == "string" else 4)
        if n >= 0:
            cur.skip(n)
    else:
        raise TooShort(f"a field of type {kafka_type} is not walked")
