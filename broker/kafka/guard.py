"""A walk of a request's bytes along its schema before kio reads them: every declared length
is checked, and what Kafka's own parser steps over is taken out.

Lengths: kio's native reader reserves memory for an array from the count the request
declares; a count of two billion asks for hundreds of gigabytes, and a failed allocation in
native code aborts the whole process (the fuzzer of the port found it:
tests/fuzz/kafka_frames.py). So each array count, string and byte length is checked here
against the bytes actually left (every element takes at least one byte) before kio sees the
request, and a null where the schema allows none is refused, as Kafka refuses it (kio would
hand the handler a None). What fails is closed as unreadable; what passes may still be
refused by kio.

What Kafka steps over, kio refuses, so it goes before kio reads:
- tagged fields the schema does not know, in the header and at every level of the body:
  KIP-482 says a receiver skips them, and Kafka's generated readers do;
- bytes after the body: Kafka's parser stops at the body's last field and never looks at
  what follows. librdkafka depends on both: its flexible Metadata request for "all topics"
  leaves three bytes of its four-byte array-count slot in the body, which Kafka reads as the
  flags and a tagged field and, after them, bytes it ignores.
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
    is_optional,
)

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "uint16": 2, "uint32": 4,
          "int64": 8, "uint64": 8, "float64": 8, "uuid": 16, "timedelta_i32": 4,
          "timedelta_i64": 8, "datetime_i64": 8}
_VARIABLE = {"string", "bytes", "records"}
# api key, api version, correlation id: the fixed start of every request header.
HEADER_START = 8


class Malformed(Exception):
    """A declared length runs past the request's bytes, a null stands where the schema allows
    none (or the schema is one not walked)."""


class _Cursor:
    __slots__ = ("data", "edits", "end", "pos")

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data = data
        self.pos = pos
        self.end = end
        # (start, stop, replacement) of each tagged section rewritten, in byte order.
        self.edits: list[tuple[int, int, bytes]] = []

    def left(self) -> int:
        return self.end - self.pos

    def skip(self, n: int) -> None:
        if n < 0 or n > self.left():
            raise Malformed(f"{n} bytes declared, {self.left()} left")
        self.pos += n

    def signed(self, size: int) -> int:
        if size > self.left():
            raise Malformed("a length runs past the end")
        fmt = {2: ">h", 4: ">i"}[size]
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def uvarint(self) -> int:
        value = shift = 0
        for _ in range(10):
            if not self.left():
                raise Malformed("a varint runs past the end")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise Malformed("a varint longer than 10 bytes")


def readable(schema: type[Any], data: bytes) -> bytes:
    """The request `data` (header and body, without the frame length) as kio can read it:
    raise Malformed unless every length it declares fits in it; answer it without the tagged
    fields kio does not know and without bytes past the body's end (`data` itself when it
    has neither)."""
    flexible = bool(schema.__flexible__)
    cur = _Cursor(data, HEADER_START, len(data))
    client_id = cur.signed(2)  # a 16-bit length in every header version, flexible ones too
    if client_id > 0:
        cur.skip(client_id)
    if flexible:
        _tagged(cur, {})  # request header v2 defines no tagged field
    _entity(schema, cur, flexible)
    if not cur.edits and cur.pos == len(data):
        return data
    out = bytearray()
    at = 0
    for start, stop, replacement in cur.edits:
        out += data[at:start]
        out += replacement
        at = stop
    out += data[at:cur.pos]
    return bytes(out)


def _entity(schema: type[Any], cur: _Cursor, flexible: bool) -> None:
    fields, tagged = _fields(schema)
    for field, kind, kafka_type, nullable in fields:
        if isinstance(kind, PrimitiveField):
            _primitive(kafka_type, cur, flexible, nullable)
        elif isinstance(kind, PrimitiveTupleField):
            for _ in range(_count(cur, flexible, nullable=nullable)):
                _primitive(kafka_type, cur, flexible, False)
        elif isinstance(kind, EntityTupleField):
            for _ in range(_count(cur, flexible, nullable=nullable)):
                _entity(kind.type_, cur, flexible)
        elif isinstance(kind, EntityField):
            _entity(kind.type_, cur, flexible)
        else:
            raise Malformed(f"field {field} is of a kind not walked")
    if flexible:
        _tagged(cur, tagged)


def _tagged(cur: _Cursor, known: dict[int, _Field]) -> None:
    """A tagged-field section: the fields of `known` tags are checked and kept, the others
    dropped (the section is then rewritten without them)."""
    start = cur.pos
    kept: list[bytes] = []
    dropped = False
    for _ in range(_section_count(cur)):
        field_start = cur.pos
        tag = cur.uvarint()
        size = cur.uvarint()
        value_start = cur.pos
        cur.skip(size)
        if tag not in known:
            dropped = True
            continue
        _, kind, kafka_type, nullable = known[tag]
        if not isinstance(kind, PrimitiveField):  # none in the versions served
            raise Malformed(f"tagged field {tag} is of a kind not walked")
        value = _Cursor(cur.data, value_start, cur.pos)
        _primitive(kafka_type, value, True, nullable)
        if value.pos != cur.pos:
            raise Malformed(f"tagged field {tag} does not fill its {size} bytes")
        kept.append(cur.data[field_start:cur.pos])
    if dropped:
        cur.edits.append((start, cur.pos, _uvarint(len(kept)) + b"".join(kept)))


# name, kind (kio's classification), Kafka type, whether it may be null
_Field = tuple[str, Any, str | None, bool]
_FIELDS: dict[type[Any], tuple[tuple[_Field, ...], dict[int, _Field]]] = {}


def _fields(schema: type[Any]) -> tuple[tuple[_Field, ...], dict[int, _Field]]:
    """The schema's fields in wire order, and its tagged fields by tag."""
    known = _FIELDS.get(schema)
    if known is not None:
        return known
    fields = []
    tagged = {}
    for field in dataclasses.fields(schema):
        described = (field.name, classify_field(field), field.metadata.get("kafka_type"),
                     is_optional(field))
        tag = get_field_tag(field)
        if tag is None:
            fields.append(described)
        else:
            tagged[int(tag)] = described
    _FIELDS[schema] = (tuple(fields), tagged)
    return _FIELDS[schema]


def _count(cur: _Cursor, flexible: bool, *, nullable: bool) -> int:
    """An array's element count (0 for null), at most the bytes left (each element takes
    one at least)."""
    n = cur.uvarint() - 1 if flexible else cur.signed(4)
    if n < 0:
        if not nullable:
            raise Malformed("a null array where the schema allows none")
        return 0
    if n > cur.left():
        raise Malformed(f"an array of {n} elements in {cur.left()} bytes")
    return n


def _section_count(cur: _Cursor) -> int:
    """The number of fields in a tagged-field section (each takes two bytes at least)."""
    n = cur.uvarint()
    if 2 * n > cur.left():
        raise Malformed(f"{n} tagged fields in {cur.left()} bytes")
    return n


def _primitive(kafka_type: str | None, cur: _Cursor, flexible: bool, nullable: bool) -> None:
    if kafka_type in _FIXED:
        cur.skip(_FIXED[kafka_type])
    elif kafka_type in _VARIABLE:
        if flexible:
            n = cur.uvarint() - 1
        else:
            n = cur.signed(2 if kafka_type == "string" else 4)
        if n >= 0:
            cur.skip(n)
        elif not nullable:
            raise Malformed(f"a null {kafka_type} where the schema allows none")
    else:
        raise Malformed(f"a field of type {kafka_type} is not walked")


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
