"""Kafka's framing and message schemas, through `kio` (typed request and response classes
for every API key and version, and their codecs).

A frame is a 4-byte big-endian length and that many bytes. A request frame starts with the
request header (v1, or v2 for a flexible version: the same fields and tagged fields after
them); the response frame starts with the response header (v0, or v1 for a flexible
version; ApiVersions always answers header v0, so that a client can read it whatever it
asked).

`SUPPORTED` is the one table that drives both the ApiVersions answer and what is served:
a request of another key, or of a version outside its window, is not read (the caller
closes the connection, as Kafka does with a request it cannot parse), except ApiVersions,
answered UNSUPPORTED_VERSION with our table. A request is read as Kafka reads it: tagged
fields it does not know and bytes past its body are stepped over (`guard`).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import IO, Any, cast

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.serial._implicit_defaults import get_implicit_default
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional
from kio.serial.errors import SerialError
from kio.static.primitive import i32Timedelta, i64Timedelta

from broker.kafka import guard

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, SASL_HANDSHAKE, API_VERSIONS = 15, 16, 17, 18
CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID = 19, 20, 22
SASL_AUTHENTICATE, DELETE_GROUPS, CONSUMER_GROUP_HEARTBEAT = 36, 42, 68

# API key -> (lowest, highest) version served. Why each stops where it does:
# docs/guide/kafka.md.
SUPPORTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 9),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 6),
    METADATA: (0, 9),
    API_VERSIONS: (0, 3),
    INIT_PRODUCER_ID: (0, 4),
    CREATE_TOPICS: (2, 5),
    DELETE_TOPICS: (1, 5),
    FIND_COORDINATOR: (0, 3),
    JOIN_GROUP: (0, 5),
    SYNC_GROUP: (0, 3),
    HEARTBEAT: (0, 3),
    LEAVE_GROUP: (0, 3),
    OFFSET_COMMIT: (2, 7),
    OFFSET_FETCH: (1, 7),
    DESCRIBE_GROUPS: (0, 4),
    LIST_GROUPS: (0, 4),
    DELETE_GROUPS: (0, 2),
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 1),
    CONSUMER_GROUP_HEARTBEAT: (0, 1),  # answered UNSUPPORTED_VERSION: consumer_protocol.py
}

_FRAME = struct.Struct(">i")
_FRAME_AND_ID = struct.Struct(">ii")  # a response's length and correlation id
_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id


class Unreadable(Exception):
    """A request this listener does not read: the connection is closed."""


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request object; None for an ApiVersions of an unknown version


def frame(payload: bytes) -> bytes:
    return _FRAME.pack(len(payload)) + payload


def frame_length(head: bytes) -> int:
    (n,) = _FRAME.unpack(head)
    return int(n)


def read_request(data: bytes) -> Request:
    """Decode a request frame's bytes (without the length), or raise Unreadable."""
    if len(data) < _HEAD.size:
        raise Unreadable("a request shorter than its header")
    key, version, correlation = _HEAD.unpack_from(data)
    window = SUPPORTED.get(key)
    if window is None:
        raise Unreadable(f"unsupported API key {key}")
    if not window[0] <= version <= window[1]:
        if key == API_VERSIONS:  # answered with our table, whatever its version
            return Request(key, version, correlation, None, None)
        raise Unreadable(f"API key {key} version {version} is outside {window[0]}..{window[1]}")
    schema = load_request_schema(key, version)
    header_type = RequestHeaderV2 if schema.__flexible__ else RequestHeaderV1
    try:
        # Before kio reserves memory for what the request declares; and without what Kafka
        # steps over (unknown tagged fields, bytes past the body), which kio refuses.
        data = guard.readable(schema, data)
        header, used = entity_reader(header_type)(data, 0)
        body, size = entity_reader(schema)(data, used)
    except (SerialError, ValueError, UnicodeDecodeError, IndexError, OverflowError,
            KeyError, guard.Malformed) as exc:
        raise Unreadable(f"API key {key} v{version} does not decode: {exc}") from None
    if used + size != len(data):  # the walk and kio disagree on where the body ends
        raise Unreadable(f"API key {key} v{version}: kio read {used + size} bytes of the "
                         f"{len(data)} the walk found")
    client_id: str | None = getattr(header, "client_id", None)
    return Request(key, version, correlation, client_id, body)


def response_bytes(request: Request, values: Mapping[str, Any]) -> bytes:
    """The response frame (with its length) answering `request`, built from `values`
    (field names as in Kafka's schemas; see `build`)."""
    return b"".join(response_parts(request, values))


def response_parts(request: Request, values: Mapping[str, Any]) -> list[bytes]:
    """`response_bytes` as the parts that make it, for a writer that sends them as they
    are (`StreamWriter.writelines`)."""
    schema = load_response_schema(request.api_key, request.api_version)
    return encode_parts(schema, request.correlation_id, build(schema, values))


def encode(schema: type[Any], correlation_id: int, body: Any) -> bytes:
    """The response frame: its length, correlation id and body."""
    return b"".join(encode_parts(schema, correlation_id, body))


class _Parts:
    """What kio writes, kept as the objects it wrote: a Fetch answer's record batches
    (megabytes) are sent from where they were built, not copied into a response buffer
    first (fresh memory of that size is faulted in page by page)."""

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = [b""]  # the length and correlation id, once known
        self.size = 0

    def write(self, data: bytes) -> int:
        self.parts.append(data)
        self.size += len(data)
        return len(data)


def encode_parts(schema: type[Any], correlation_id: int, body: Any) -> list[bytes]:
    """The response frame as parts: its length (known once the body is written) and
    correlation id first."""
    out = _Parts()
    if schema.__flexible__ and schema.__api_key__ != API_VERSIONS:
        out.write(b"\x00")  # response header v1: no tagged fields
    entity_writer(schema)(cast("IO[bytes]", out), body)  # kio calls only `write`
    out.parts[0] = _FRAME_AND_ID.pack(out.size + 4, correlation_id)
    return out.parts


def build(schema: type[Any], values: Mapping[str, Any]) -> Any:
    """An instance of a kio class of any version from plain values: keys the version lacks
    are ignored, fields not given take their default (empty, zero, null); nested entities
    are given as mappings (or lists of them); durations as integer milliseconds."""
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(schema):
        kind = classify_field(field)
        if field.name in values:
            value = values[field.name]
            if isinstance(kind, EntityTupleField) and value is not None:
                value = tuple(v if not isinstance(v, Mapping) else build(kind.type_, v)
                              for v in value)
            elif isinstance(kind, EntityField) and isinstance(value, Mapping):
                value = build(kind.type_, value)
            elif isinstance(value, list):
                value = tuple(value)
            elif field.type in (i32Timedelta, "i32Timedelta") and isinstance(value, int):
                value = i32Timedelta.parse(timedelta(milliseconds=value))
            elif field.type in (i64Timedelta, "i64Timedelta") and isinstance(value, int):
                value = i64Timedelta.parse(timedelta(milliseconds=value))
            elif isinstance(value, int) and getattr(kind, "type_", None) is ErrorCode:
                value = ErrorCode(value)
            kwargs[field.name] = value
        elif field.default is not dataclasses.MISSING:
            continue
        elif is_optional(field):
            kwargs[field.name] = None
        elif isinstance(kind, EntityTupleField) or str(field.type).startswith("tuple"):
            kwargs[field.name] = ()
        elif isinstance(kind, EntityField):
            kwargs[field.name] = build(kind.type_, {})
        elif getattr(kind, "type_", None) is ErrorCode:
            kwargs[field.name] = ErrorCode.none
        elif getattr(kind, "type_", None) is bool:
            kwargs[field.name] = False
        else:
            kwargs[field.name] = get_implicit_default(kind.type_)
    return schema(**kwargs)


def field_of(body: Any, name: str, default: Any = None) -> Any:
    """A request field that older versions lack."""
    return getattr(body, name, default)
