"""Kafka record batches (message format v2, "RecordBatch"): decoding what producers send,
with the four compression codecs, and encoding what Fetch answers (uncompressed).

    batch:  i64 baseOffset | i32 batchLength | i32 partitionLeaderEpoch | i8 magic (2)
            | u32 crc (CRC-32C of what follows) | i16 attributes | i32 lastOffsetDelta
            | i64 baseTimestamp | i64 maxTimestamp | i64 producerId | i16 producerEpoch
            | i32 baseSequence | i32 recordCount | records (compressed as a whole when the
              attributes' low 3 bits say so: 1 gzip, 2 snappy, 3 lz4, 4 zstd)
    record: varint length | i8 attributes | varlong timestampDelta | varint offsetDelta
            | varint keyLength (-1: null) | key | varint valueLength | value
            | varint headerCount | headers (varint keyLength | key | varint valueLength | value)

kio has types for these, but its reader keeps timestamps to the second and does not
decompress, so the codec is here, on the struct module and the codecs' libraries.

Everything a client declares is checked before it is trusted: lengths against the bytes
there, record counts against what the batch can hold, and decompression is capped at
`max_bytes` of output however small the compressed input (a few hundred bytes of gzip or
zstd can declare gigabytes); a batch that breaks any rule is refused whole.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import cramjam
import crc32c
import lz4.frame
import msgspec
import zstandard

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_HEAD = struct.Struct(">qiibIhiqqqhii")
_FRONT = struct.Struct(">qiibI")  # baseOffset .. crc
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordCount
_AFTER_CRC = 21  # offset of the attributes, where the CRC starts
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1

Header = tuple[bytes, bytes | None]


class BadBatch(Exception):
    """A record batch that cannot be taken: CORRUPT_MESSAGE (or the code given)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class InRecord(msgspec.Struct, frozen=True, gc=False):
    offset_delta: int
    timestamp: int  # ms
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    attributes: int
    base_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[InRecord]

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL)

    @property
    def control(self) -> bool:
        return bool(self.attributes & _CONTROL)


def decode_batches(data: bytes, *, max_bytes: int, max_records: int) -> list[Batch]:
    """Every batch of a partition's records, or BadBatch. `max_bytes` caps the bytes the
    records of all batches may decompress to, `max_records` their count."""
    batches: list[Batch] = []
    pos = 0
    budget = [max_bytes, max_records]
    while pos < len(data):
        if len(data) - pos < _HEAD.size:
            raise BadBatch("a record batch is truncated")
        (base_offset, length, _epoch, magic, crc, attributes, last_delta, base_ts, _max_ts,
         producer_id, producer_epoch, base_sequence, count) = _HEAD.unpack_from(data, pos)
        end = pos + 12 + length
        if magic != 2:
            raise BadBatch(f"record batch magic {magic}: only v2 (magic 2) is taken", 87)
        if length < _HEAD.size - 12 or end > len(data):
            raise BadBatch("a record batch's length runs past the request")
        if crc32c.crc32c(data[pos + _AFTER_CRC:end]) != crc:
            raise BadBatch("a record batch's CRC does not match")
        if count < 0 or count > budget[1]:
            raise BadBatch(f"a record batch declares {count} records")
        budget[1] -= count
        body = data[pos + _HEAD.size:end]
        codec = attributes & 7
        if codec != CODEC_NONE:
            body = _decompress(codec, body, budget[0])
        budget[0] -= len(body)
        records = _records(body, count, base_ts)
        if records and records[-1].offset_delta != last_delta and not attributes & _CONTROL:
            # Producers always write deltas 0..n-1; anything else is not a batch we build
            # offsets for.
            raise BadBatch("a record batch's last offset delta does not match its records")
        batches.append(Batch(base_offset, attributes, base_ts, producer_id, producer_epoch,
                             base_sequence, records))
        pos = end
    return batches


def _records(body: bytes, count: int, base_ts: int) -> list[InRecord]:
    """The records of a batch's (decompressed) body. Written for speed: every produced record
    passes here, so the one-byte varints that most fields are (attributes, offset delta, key
    and header counts) are read inline, and fields are sliced from `body` (bytes) directly."""
    out: list[InRecord] = []
    append = out.append
    varint = _varint
    fields = _fields
    size = len(body)
    pos = 0
    try:
        for expected in range(count):
            length = body[pos]
            if length < 0x80:
                length = (length >> 1) ^ -(length & 1)
                pos += 1
            else:
                length, pos = varint(body, pos)
            start = pos
            stop = start + length
            if length < 0 or stop > size:
                raise BadBatch("a record's length runs past its batch")
            pos += 1  # record attributes (unused)
            ts_delta = body[pos]
            if ts_delta < 0x80:
                ts_delta = (ts_delta >> 1) ^ -(ts_delta & 1)
                pos += 1
            else:
                ts_delta, pos = varint(body, pos)
            offset_delta = body[pos]
            if offset_delta < 0x80:
                offset_delta = (offset_delta >> 1) ^ -(offset_delta & 1)
                pos += 1
            else:
                offset_delta, pos = varint(body, pos)
            if offset_delta != expected:
                raise BadBatch("record offset deltas are not 0, 1, 2, ...")
            key, value, headers, pos = fields(body, pos, stop, length)
            if pos != stop:
                raise BadBatch("a record's fields do not add up to its length")
            timestamp = base_ts + ts_delta
            if not _I64_MIN <= timestamp <= _I64_MAX:
                raise BadBatch("a record's timestamp is outside 64 bits")
            append(InRecord(offset_delta, timestamp, key, value, headers))
    except IndexError:
        raise BadBatch("a record is truncated") from None
    if pos != size:
        raise BadBatch("a record batch has bytes past its last record")
    return out


def _fields(body: bytes, pos: int, stop: int, length: int
            ) -> tuple[bytes | None, bytes | None, tuple[Header, ...], int]:
    """A record's key, value and headers from `pos`; no field may run past `stop`, the
    record's end."""
    key, pos = _bytes(body, pos, stop)
    value, pos = _bytes(body, pos, stop)
    n_headers = body[pos]
    if n_headers == 0:  # zigzag 0: no headers, the usual case
        return key, value, (), pos + 1
    n_headers, pos = _varint(body, pos)
    if n_headers < 0 or n_headers > length:
        raise BadBatch("a record declares more headers than it can hold")
    headers = []
    for _ in range(n_headers):
        name, pos = _bytes(body, pos, stop)
        if name is None:
            raise BadBatch("a record header has a null key")
        header_value, pos = _bytes(body, pos, stop)
        headers.append((name, header_value))
    return key, value, tuple(headers), pos


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (up to 64 bits) at `pos`, and the position after it."""
    shift = 0
    raw = 0
    while True:
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise BadBatch("a varint is longer than 10 bytes")
    return (raw >> 1) ^ -(raw & 1), pos


def _bytes(data: bytes, pos: int, stop: int) -> tuple[bytes | None, int]:
    """A length-prefixed field (length -1: null) that must end by `stop`."""
    n = data[pos]
    if n < 0x80:
        n = (n >> 1) ^ -(n & 1)
        pos += 1
    else:
        n, pos = _varint(data, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > stop:
        raise BadBatch("a record field runs past its record")
    return data[pos:end], end


def _decompress(codec: int, data: bytes, cap: int) -> bytes:
    try:
        if codec == CODEC_GZIP:
            out = _capped_zlib(data, cap)
        elif codec == CODEC_SNAPPY:
            out = _snappy(data, cap)
        elif codec == CODEC_LZ4:
            out = lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=cap + 1)
        elif codec == CODEC_ZSTD:
            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
            out = reader.read(cap + 1)
        else:
            raise BadBatch(f"unknown compression codec {codec}", 76)
    except BadBatch:
        raise
    except Exception as exc:  # noqa: BLE001 - each codec library raises its own errors
        raise BadBatch(f"records do not decompress: {exc}") from None
    if len(out) > cap:
        raise BadBatch(f"records decompress to more than {cap} bytes", 10)
    return out


def _capped_zlib(data: bytes, cap: int) -> bytes:
    reader = zlib.decompressobj(wbits=47)  # gzip or zlib header
    out = reader.decompress(data, cap + 1)
    return bytes(out)


def _snappy(data: bytes, cap: int) -> bytes:
    """Snappy as Kafka clients send it: xerial's framing (Java and kafka-python) or one raw
    block (librdkafka); each block's declared size is checked before it is decoded."""
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data, cap)
    pos = 16  # magic, version, compatible version
    parts = []
    left = cap
    while pos < len(data):
        if pos + 4 > len(data):
            raise BadBatch("a snappy block header is truncated")
        (n,) = struct.unpack_from(">i", data, pos)
        if n < 0 or pos + 4 + n > len(data):
            raise BadBatch("a snappy block runs past its batch")
        block = _snappy_block(data[pos + 4:pos + 4 + n], left)
        left -= len(block)
        parts.append(block)
        pos += 4 + n
    return b"".join(parts)


def _snappy_block(data: bytes, cap: int) -> bytes:
    size = cramjam.snappy.decompress_raw_len(data)
    if size > cap:
        raise BadBatch(f"records decompress to more than {cap} bytes", 10)
    return bytes(cramjam.snappy.decompress_raw(data))


# --- encoding (Fetch answers) ---------------------------------------------------------------

# The zigzag varints of 0 .. 8191 (a record of up to 8 KiB, every small field), looked up
# instead of built: the encoder writes several per record.
_SMALL_VARINTS = [bytes([raw]) if raw < 0x80 else bytes([(raw & 0x7F) | 0x80, raw >> 7])
                  for raw in range(2 * 8192)]
_NULL = b"\x01"  # varint -1


def _varint_bytes(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    if raw < 16384:
        return _SMALL_VARINTS[raw]
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


class OutRecord(NamedTuple):
    """A record to encode. A plain tuple of these five fields does as well (the Fetch
    answer builds those: cheaper than a class per record)."""

    offset: int
    timestamp: int  # ms
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def encode_batch(records: Sequence[tuple[int, int, bytes | None, bytes | None,
                                         tuple[Header, ...]]]) -> bytearray:
    """One uncompressed v2 batch of consecutive-or-gapped offsets (gaps are offset deltas),
    CreateTime, no producer, from (offset, timestamp, key, value, headers) records.

    Written for speed (every fetched record passes here): the small varints (deltas,
    lengths up to 8 KiB) are looked up, not built; the records' bytes are gathered as parts
    and joined once, into the batch itself, whose head is then written in place. A second
    buffer of the batch's size would cost more than its copy: fresh memory of megabytes is
    faulted in page by page."""
    base_offset, base_ts = records[0][0], records[0][1]
    max_ts = base_ts
    parts: list[bytes] = [b""]  # the batch's head, once the records are counted
    add = parts.append
    small = _SMALL_VARINTS
    varint = _varint_bytes
    for offset, timestamp, key, value, headers in records:
        if timestamp > max_ts:  # noqa: PLR1730 - cheaper than a call of max() per record
            max_ts = timestamp
        delta = timestamp - base_ts
        ts_delta = small[delta << 1] if 0 <= delta < 8192 else varint(delta)
        delta = offset - base_offset
        offset_delta = small[delta << 1] if 0 <= delta < 8192 else varint(delta)
        if key is None:
            key_len = _NULL
            size = 0
        else:
            size = len(key)
            key_len = small[size << 1] if size < 8192 else varint(size)
        if value is None:
            value_len = _NULL
        else:
            n = len(value)
            size += n
            value_len = small[n << 1] if n < 8192 else varint(n)
        tail = _headers(headers) if headers else b"\x00"
        # attributes (one byte), the varints, the key and value, the headers
        size += 1 + len(ts_delta) + len(offset_delta) + len(key_len) + len(value_len) + len(tail)
        add(small[size << 1] if size < 8192 else varint(size))
        add(b"\x00")
        add(ts_delta)
        add(offset_delta)
        add(key_len)
        if key is not None:
            add(key)
        add(value_len)
        if value is not None:
            add(value)
        add(tail)
    parts[0] = bytes(_FRONT.size) + _TAIL.pack(0, records[-1][0] - base_offset, base_ts,
                                               max_ts, -1, -1, -1, len(records))
    batch = bytearray().join(parts)
    with memoryview(batch) as view, view[_AFTER_CRC:] as covered:
        crc = crc32c.crc32c(covered)
    _FRONT.pack_into(batch, 0, base_offset, len(batch) - 12, 0, 2, crc)
    return batch


def _headers(headers: tuple[Header, ...]) -> bytes:
    parts = [_varint_bytes(len(headers))]
    for name, value in headers:
        parts.append(_varint_bytes(len(name)))
        parts.append(name)
        if value is None:
            parts.append(_NULL)
        else:
            parts.append(_varint_bytes(len(value)))
            parts.append(value)
    return b"".join(parts)
