"""Segments: many messages packed as storage frames and compressed with zstd.

Frame layout (wire-protocol §7.1), little-endian:
    u32 body_len | u8 flags | 16-byte message id | [16-byte trace id if flags & 1]
    | u16 len + transactionId | [u16 len + producerSub if flags & 2] | payload JSON bytes
An empty payload means JSON `null`. A segment is frames back to back, zstd-compressed; frame i
of a segment has offset base_offset + i.
"""

from __future__ import annotations

import struct
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import zstandard

from core.errors import BadRequest, PayloadTooLarge, SegmentError
from core.ids import uuid_of_int

FLAG_TRACE = 1
FLAG_PRODUCER = 2
FLAG_ENCRYPTED = 4
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_HEAD = struct.Struct("<IB16s")  # body_len, flags, message id
# A frame's length and flags, without its message id: for readers that step over the id.
FRAME_LENGTH_AND_FLAGS = struct.Struct("<IB")
FRAME_HEAD_SIZE = _HEAD.size

# Level 1 is what the official client uses for its own frames: most of the ratio for a
# fraction of the CPU, which matters because compression runs on the event loop.
ZSTD_LEVEL = 1
# The payload bytes the write path packs into one segment before it starts another
# (core/engine/writes.py `segments_of`). A flush merges whatever waited for its partition
# (up to COALESCER_MAX_FLUSH_MESSAGES), and a reader always takes a whole segment: a pop of
# one message reads and decompresses all of it. 1 MiB is many small messages' worth (a push
# of 100 corpus messages is about 110 KB, one segment as before) and bounds what a pop reads
# beyond what it delivers; a larger message is a segment of its own.
SEGMENT_TARGET_BYTES = 1 << 20
_local = threading.local()


@dataclass(slots=True)  # not frozen: one per message, and frozen __init__ is slow
class Frame:
    """One stored message."""

    message_id: uuid.UUID
    transaction_id: str
    payload: bytes  # JSON bytes exactly as stored; b"null" for a null payload
    trace_id: uuid.UUID | None = None
    producer_sub: str | None = None


class FrameFields(Protocol):
    """What a frame is made of: a `Frame`, or a message on its way in (core.engine.writes)."""

    @property
    def message_id(self) -> uuid.UUID: ...
    @property
    def transaction_id(self) -> str: ...
    @property
    def payload(self) -> bytes: ...
    @property
    def trace_id(self) -> uuid.UUID | None: ...
    @property
    def producer_sub(self) -> str | None: ...


def encode_frame(frame: FrameFields) -> bytes:
    txid = frame.transaction_id.encode()
    flags = 0
    parts = [b"", b"", frame.message_id.bytes]
    if frame.trace_id is not None:
        flags |= FLAG_TRACE
        parts.append(frame.trace_id.bytes)
    parts += [_U16.pack(len(txid)), txid]
    if frame.producer_sub is not None:
        flags |= FLAG_PRODUCER
        sub = frame.producer_sub.encode()
        parts += [_U16.pack(len(sub)), sub]
    parts.append(frame.payload)
    parts[1] = bytes((flags,))
    body_len = sum(len(p) for p in parts)
    parts[0] = _U32.pack(body_len)
    return b"".join(parts)


# A frame with neither trace id nor producerSub, up to its transactionId's length: the
# common case, encoded with one struct call.
_PLAIN = struct.Struct("<IB16sH")
_PLAIN_FIXED = _PLAIN.size - 4  # body bytes before the transactionId


def pack(frames: Sequence[FrameFields]) -> bytes:
    """Encode and compress frames into one segment blob."""
    parts: list[bytes] = []
    add = parts.append
    plain = _PLAIN.pack
    for f in frames:
        if f.trace_id is None and f.producer_sub is None:
            txid = f.transaction_id.encode()
            payload = f.payload
            add(plain(_PLAIN_FIXED + len(txid) + len(payload), 0,
                      f.message_id.int.to_bytes(16, "big"), len(txid)))
            add(txid)
            add(payload)
        else:
            add(encode_frame(f))
    return _compressor().compress(b"".join(parts))


def unpack(blob: bytes) -> list[Frame]:
    """Decompress a segment blob and decode every frame, in offset order."""
    try:
        raw = _decompressor().decompress(blob)
    except zstandard.ZstdError as exc:
        raise SegmentError(f"segment does not decompress: {exc}") from exc
    return list(iter_frames(raw))


def unpack_client_frame(blob: bytes, *, max_size: int, exact_size: int | None = None) -> bytes:
    """The content of one zstd frame a client built (wire-protocol §7.2), decompressed only
    when that is safe: the frame must declare its content size, and the size must be at most
    `max_size` (else PayloadTooLarge) and equal `exact_size` when given, checked before
    anything is decompressed (a few dozen bytes of zstd can declare gigabytes of zeros);
    nothing may follow the frame.

    The errors' messages continue the caller's subject ("... is not a zstd frame"), so the
    caller can say where the frame was."""
    if bytes(blob[:4]) != ZSTD_MAGIC:
        raise BadRequest("is not a zstd frame")
    try:
        size = zstandard.frame_content_size(blob)
    except zstandard.ZstdError:
        raise BadRequest("has a malformed zstd frame header") from None
    if size < 0:
        raise BadRequest("is a zstd frame that does not declare its content size")
    if exact_size is not None and size != exact_size:
        raise BadRequest(f"declares {size} bytes of content, not {exact_size}")
    if size > max_size:
        raise PayloadTooLarge(f"declares {size} bytes of content, more than the {max_size} "
                              f"bytes allowed")
    try:
        # zstd itself refuses content that differs from the declared size.
        return _decompressor().decompress(blob, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise BadRequest(f"does not decompress: {exc}") from None


def content_size(blob: bytes) -> int:
    """The size a segment's frames have decompressed, as its first zstd frame's header
    declares it; the blob's own size when it does not say (what the append records in
    log_segments.raw_bytes: schema/functions/20_append.sql)."""
    try:
        size = zstandard.frame_content_size(blob)
    except zstandard.ZstdError:
        return len(blob)
    return size if size >= 0 else len(blob)


def is_one_zstd_frame(blob: bytes) -> bool:
    """Whether `blob` is exactly one whole zstd frame: what a reader that decodes a single
    frame (the official client's framed pop) gets in full. Walks the block headers only."""
    if bytes(blob[:4]) != ZSTD_MAGIC:
        return False
    try:
        pos = zstandard.frame_header_size(blob)
    except zstandard.ZstdError:
        return False
    end = len(blob)
    while pos + 3 <= end:
        header = int.from_bytes(blob[pos:pos + 3], "little")
        kind = header >> 1 & 3
        if kind == 3:  # reserved block type
            return False
        pos += 3 + (1 if kind == 1 else header >> 3)  # an RLE block holds one byte
        if header & 1:  # the last block
            return pos + (4 if blob[4] & 0x04 else 0) == end  # optional checksum
    return False


def frame_range(raw: bytes, skip: int, count: int) -> bytes:
    """The bytes of frames skip .. skip+count-1 of decompressed segment bytes, as stored."""
    start = _past_frames(raw, 0, skip)
    return raw[start:_past_frames(raw, start, count)]


def _past_frames(raw: bytes, pos: int, count: int) -> int:
    """Where the frame `count` frames after the one at `pos` starts."""
    try:
        for _ in range(count):
            pos += 4 + _U32.unpack_from(raw, pos)[0]
    except struct.error:
        pos = len(raw) + 1
    if pos > len(raw):
        raise SegmentError("frame runs past the end of the segment")
    return pos


past_frames = _past_frames


def decompress(blob: bytes) -> bytes:
    """A stored segment's frames, decompressed, not decoded (every zstd frame of the blob,
    should it hold several)."""
    try:
        if is_one_zstd_frame(blob):
            return _decompressor().decompress(blob)
        parts = []
        while blob:
            reader = _decompressor().decompressobj()
            parts.append(reader.decompress(blob))
            if not reader.eof:
                raise SegmentError("segment ends inside a zstd frame")
            blob = reader.unused_data
        return b"".join(parts)
    except zstandard.ZstdError as exc:
        raise SegmentError(f"segment does not decompress: {exc}") from exc


def iter_frames(raw: bytes, first: int = 0, last: int | None = None) -> Iterator[Frame]:
    """Decode the frames of decompressed segment bytes, or only frames first..last (by
    index; the ones before are skipped by their lengths, undecoded)."""
    try:
        for mid, trace, txid, sub, payload in iter_frame_parts(raw, first, last):
            yield Frame(_uuid(mid), txid.decode(), payload or b"null",
                        None if trace is None else _uuid(trace),
                        None if sub is None else sub.decode())
    except UnicodeDecodeError as exc:
        raise SegmentError(f"malformed frame: {exc}") from exc


# A frame's parts as stored, undecoded: message id (16 bytes), trace id (16 bytes) or None,
# transactionId (UTF-8), producerSub (UTF-8) or None, payload (JSON; b"" stands for null).
FrameParts = tuple[bytes, bytes | None, bytes, bytes | None, bytes]


def iter_frame_parts(raw: bytes, first: int = 0, last: int | None = None
                     ) -> Iterator[FrameParts]:
    """`iter_frames` without decoding: the parts of frames first..last as bytes, for an
    answer that splices them (the JSON pop answer) instead of building a Frame each."""
    end = len(raw)
    pos = _past_frames(raw, 0, first) if first else 0
    index = first
    head, u16 = _HEAD.unpack_from, _U16.unpack_from
    try:
        while pos < end and (last is None or index <= last):
            body_len, flags, mid = head(raw, pos)
            stop = pos + 4 + body_len
            if stop > end:
                raise SegmentError("frame runs past the end of the segment")
            pos += _HEAD.size
            trace = None
            if flags & FLAG_TRACE:
                trace = raw[pos:pos + 16]
                pos += 16
            (n,) = u16(raw, pos)
            txid = raw[pos + 2:pos + 2 + n]
            pos += 2 + n
            sub = None
            if flags & FLAG_PRODUCER:
                (n,) = u16(raw, pos)
                sub = raw[pos + 2:pos + 2 + n]
                pos += 2 + n
            yield mid, trace, txid, sub, raw[pos:stop]
            pos = stop
            index += 1
    except struct.error as exc:
        raise SegmentError(f"malformed frame: {exc}") from exc


def unpack_range(blob: bytes, first: int, last: int) -> list[Frame]:
    """Frames first..last (by index) of a stored segment blob: a pop's span within one of
    its segments, without decoding the frames around it."""
    return list(iter_frames(decompress(blob), first, last))


def _uuid(raw: bytes | memoryview) -> uuid.UUID:
    return uuid_of_int(int.from_bytes(raw, "big"))


def _compressor() -> zstandard.ZstdCompressor:
    # zstd contexts are not thread-safe; one per thread (the event loop is one thread).
    c = getattr(_local, "c", None)
    if c is None:
        c = _local.c = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "d", None)
    if d is None:
        d = _local.d = zstandard.ZstdDecompressor()
    return d
