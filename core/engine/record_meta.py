"""Record metadata a segment may carry beside its frames: what a Kafka record has and a
Queen message has not (its key, headers, producer timestamp, and how its value bytes map to
the stored JSON payload).

Storage frames (core/segments.py) are unchanged. A segment holding at least one
record produced through the Kafka edge is followed, after its zstd frame, by one zstd
*skippable* frame (magic 0x184D2A5B, u32 length; every zstd decoder steps over it):

    "QKM1" | u32 frame_count | per frame: u8 present
        present 1: u8 value_form | i64 timestamp_ms | i32 key_len (-1: null) | key
                   | u32 header_count | per header: u32 key_len | key | i32 len (-1: null) | value

So older segments read as before, and every reader that decodes frames (HTTP pop, the
framed pop, inspection, DLQ) sees the JSON payload only: the framed pop ships such a segment
decompressed (it is not one bare zstd frame), never the side-car.

A Kafka value becomes the frame's JSON payload (`stored_payload`):
    FORM_JSON   the value is one JSON document: stored byte for byte (a Queen consumer pops
                that document)
    FORM_NULL   a null value (a tombstone): the null payload
    FORM_TEXT   UTF-8 text that is not JSON: stored as a JSON string of that text
    FORM_BASE64 anything else: stored as a JSON string of its standard base64
and `kafka_value` turns the payload back into the exact bytes.
"""

from __future__ import annotations

import base64
import struct
import threading
from collections.abc import Sequence

import msgspec
import zstandard

from core.errors import SegmentError

FORM_JSON, FORM_NULL, FORM_TEXT, FORM_BASE64 = 0, 1, 2, 3
SKIPPABLE_MAGIC = 0x184D2A5B
_MAGIC = b"QKM1"
_SKIP_HEAD = struct.Struct("<II")
_FIXED = struct.Struct("<Bqi")  # value form, timestamp, key length
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_STRING_DECODER = msgspec.json.Decoder(str)

Header = tuple[bytes, bytes | None]
_local = threading.local()


class RecordMeta(msgspec.Struct, frozen=True, gc=False):
    """A Kafka record's own fields, kept beside its frame (one per record produced or read
    through the Kafka edge: a Struct is built in C)."""

    value_form: int
    timestamp_ms: int
    key: bytes | None
    headers: tuple[Header, ...] = ()


def stored_payload(value: bytes | None) -> tuple[bytes, int]:
    """The JSON payload that stores a Kafka value, and the form it took."""
    if value is None:
        return b"", FORM_NULL
    try:
        msgspec.json.decode(value)
        return value, FORM_JSON
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return msgspec.json.encode(base64.b64encode(value).decode("ascii")), FORM_BASE64
    return msgspec.json.encode(text), FORM_TEXT


def kafka_value(payload: bytes, meta: RecordMeta | None) -> bytes | None:
    """The Kafka value of a stored message: the original bytes of a Kafka record; the JSON
    payload text of a message pushed by a Queen client."""
    if meta is None:
        return payload
    return value_of(payload, meta.value_form)


def value_of(payload: bytes, form: int) -> bytes | None:
    """The Kafka value that `payload` stores in `form`."""
    if form == FORM_JSON:
        return payload
    if form == FORM_NULL:
        return None
    try:
        text = _STRING_DECODER.decode(payload)
    except msgspec.DecodeError as exc:
        raise SegmentError(f"record metadata does not match its payload: {exc}") from exc
    if form == FORM_TEXT:
        return text.encode("utf-8")
    return base64.b64decode(text)


def encode(metas: Sequence[RecordMeta | None]) -> bytes:
    """The skippable frame for a segment's frames (None: a frame with no Kafka fields)."""
    parts = [_MAGIC, _U32.pack(len(metas))]
    add = parts.append
    for meta in metas:
        if meta is None:
            add(b"\x00")
            continue
        add(b"\x01")
        key = meta.key
        add(_FIXED.pack(meta.value_form, meta.timestamp_ms, -1 if key is None else len(key)))
        if key is not None:
            add(key)
        add(_U32.pack(len(meta.headers)))
        for name, value in meta.headers:
            add(_U32.pack(len(name)))
            add(name)
            add(_I32.pack(-1 if value is None else len(value)))
            if value is not None:
                add(value)
    body = b"".join(parts)
    return _SKIP_HEAD.pack(SKIPPABLE_MAGIC, len(body)) + body


def split(blob: bytes) -> tuple[bytes, list[RecordMeta | None] | None]:
    """A stored (opened) segment blob's decompressed frames and its side-car's entries
    (None when it has none)."""
    raw, body = split_raw(blob)
    return raw, None if body is None else decode(body)


def split_raw(blob: bytes) -> tuple[bytes, bytes | None]:
    """A stored (opened) segment blob's decompressed frames and its side-car's bytes, not
    decoded (None when it has none; `decode` reads them, `core/kafka/stored.py` walks
    them beside the frames)."""
    reader = _decompressor().decompressobj()
    try:
        raw = reader.decompress(blob)
    except zstandard.ZstdError as exc:
        raise SegmentError(f"segment does not decompress: {exc}") from exc
    rest = reader.unused_data
    if len(rest) < _SKIP_HEAD.size:
        return raw, None
    magic, size = _SKIP_HEAD.unpack_from(rest)
    if magic != SKIPPABLE_MAGIC:
        return raw, None
    return raw, rest[_SKIP_HEAD.size:_SKIP_HEAD.size + size]


def _decompressor() -> zstandard.ZstdDecompressor:
    # One per thread, as core/segments.py keeps its own (contexts are not
    # thread-safe, and making one per segment read costs more than the read).
    d = getattr(_local, "d", None)
    if d is None:
        d = _local.d = zstandard.ZstdDecompressor()
    return d


def entries(body: bytes) -> tuple[int, int]:
    """A side-car's entry count and where its first entry starts."""
    if body[:4] != _MAGIC:
        raise SegmentError("record metadata has an unknown format")
    try:
        return _U32.unpack_from(body, 4)[0], 8
    except struct.error as exc:
        raise SegmentError(f"record metadata is malformed: {exc}") from exc


def skip_entries(body: bytes, pos: int, n: int) -> int:
    """Where the entry `n` entries after the one at `pos` starts."""
    try:
        for _ in range(n):
            if not body[pos]:
                pos += 1
                continue
            key_len = _FIXED.unpack_from(body, pos + 1)[2]
            pos += 1 + _FIXED.size + max(0, key_len)
            (headers,) = _U32.unpack_from(body, pos)
            pos += 4
            for _ in range(headers):
                pos += 4 + _U32.unpack_from(body, pos)[0]
                pos += 4 + max(0, _I32.unpack_from(body, pos)[0])
    except (struct.error, IndexError) as exc:
        raise SegmentError(f"record metadata is malformed: {exc}") from exc
    return pos


def decode(body: bytes) -> list[RecordMeta | None]:
    count, pos = entries(body)
    try:
        out: list[RecordMeta | None] = []
        add = out.append
        for _ in range(count):
            if not body[pos]:
                add(None)
                pos += 1
                continue
            form, timestamp, key, headers, pos = read_entry(body, pos)
            add(RecordMeta(form, timestamp, key, headers) if headers
                else RecordMeta(form, timestamp, key))
    except (struct.error, IndexError) as exc:
        raise SegmentError(f"record metadata is malformed: {exc}") from exc
    return out


def read_entry(body: bytes, pos: int
               ) -> tuple[int, int, bytes | None, tuple[Header, ...], int]:
    """A present entry from its present byte at `pos`: its value form, timestamp, key and
    headers, and where the next entry starts. Raises struct.error or IndexError on
    truncated bytes (the callers turn those into SegmentError)."""
    form, timestamp, key_len = _FIXED.unpack_from(body, pos + 1)
    pos += 1 + _FIXED.size
    key = None
    if key_len >= 0:
        key = body[pos:pos + key_len]
        if len(key) != key_len:
            raise SegmentError("record metadata is malformed: a key is truncated")
        pos += key_len
    (n,) = _U32.unpack_from(body, pos)
    pos += 4
    if not n:
        return form, timestamp, key, (), pos
    headers, pos = read_headers(body, pos, n)
    return form, timestamp, key, headers, pos


def read_headers(body: bytes, pos: int, n: int) -> tuple[tuple[Header, ...], int]:
    """`n` headers of an entry from `pos`, and the position after them."""
    headers: list[Header] = []
    for _ in range(n):
        (name_len,) = _U32.unpack_from(body, pos)
        name = body[pos + 4:pos + 4 + name_len]
        pos += 4 + name_len
        (value_len,) = _I32.unpack_from(body, pos)
        pos += 4
        value = None
        if value_len >= 0:
            value = body[pos:pos + value_len]
            pos += value_len
        headers.append((name, value))
    return tuple(headers), pos
