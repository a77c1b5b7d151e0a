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

import zstandard

from core.errors import BadRequest, PayloadTooLarge, SegmentError

FLAG_TRACE = 1
FLAG_PRODUCER = 2
FLAG_ENCRYPTED = 4
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_HEAD = struct.Struct("<IB16s")  # body_len, flags, message id

# Level 1 is what the official client uses for its own frames: most of the ratio for a
# fraction of the CPU, which matters because compression runs on the event loop.
ZSTD_LEVEL = 1
_local = threading.local()


@dataclass(slots=True)  # not frozen: one per message, and frozen __init__ is slow
class Frame:
    """One stored message."""

    message_id: uuid.UUID
    transaction_id: str
    payload: bytes  # JSON bytes exactly as stored; b"null" for a null payload
    trace_id: uuid.UUID | None = None
    producer_sub: str | None = None


def encode_frame(frame: Frame) -> bytes:
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


def pack(frames: Sequence[Frame]) -> bytes:
    """Encode and compress frames into one segment blob."""
    raw = b"".join(encode_frame(f) for f in frames)
    return _compressor().compress(raw)


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
    try:
        for _ in range(count):
            pos += 4 + _U32.unpack_from(raw, pos)[0]
    except struct.error:
        pos = len(raw) + 1
    if pos > len(raw):
        raise SegmentError("frame runs past the end of the segment")
    return pos


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


def iter_frames(raw: bytes) -> Iterator[Frame]:
    view = memoryview(raw)
    pos = 0
    end = len(raw)
    try:
        while pos < end:
            body_len, flags, mid = _HEAD.unpack_from(view, pos)
            stop = pos + 4 + body_len
            if stop > end:
                raise SegmentError("frame runs past the end of the segment")
            pos += _HEAD.size
            trace = None
            if flags & FLAG_TRACE:
                trace = uuid.UUID(bytes=bytes(view[pos:pos + 16]))
                pos += 16
            (n,) = _U16.unpack_from(view, pos)
            txid = str(view[pos + 2:pos + 2 + n], "utf-8")
            pos += 2 + n
            sub = None
            if flags & FLAG_PRODUCER:
                (n,) = _U16.unpack_from(view, pos)
                sub = str(view[pos + 2:pos + 2 + n], "utf-8")
                pos += 2 + n
            payload = bytes(view[pos:stop]) or b"null"
            pos = stop
            yield Frame(uuid.UUID(bytes=mid), txid, payload, trace, sub)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise SegmentError(f"malformed frame: {exc}") from exc


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
