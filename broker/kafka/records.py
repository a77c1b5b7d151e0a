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
from dataclasses import dataclass

import cramjam
import crc32c
import lz4.frame
import zstandard

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_HEAD = struct.Struct(">qiibIhiqqqhii")
_AFTER_CRC = 21  # offset of the attributes, where the CRC starts
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


class BadBatch(Exception):
    """A record batch that cannot be taken: CORRUPT_MESSAGE (or the code given)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class InRecord:
    offset_delta: int
    timestamp: int  # ms
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[bytes, bytes | None], ...]


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
    out: list[InRecord] = []
    view = memoryview(body)
    pos = 0
    try:
        for expected in range(count):
            length, pos = _varint(view, pos)
            start = pos
            if length < 0 or start + length > len(view):
                raise BadBatch("a record's length runs past its batch")
            pos += 1  # record attributes (unused)
            ts_delta, pos = _varint(view, pos)
            offset_delta, pos = _varint(view, pos)
            if offset_delta != expected:
                raise BadBatch("record offset deltas are not 0, 1, 2, ...")
            key, pos = _bytes(view, pos)
            value, pos = _bytes(view, pos)
            n_headers, pos = _varint(view, pos)
            if n_headers < 0 or n_headers > length:
                raise BadBatch("a record declares more headers than it can hold")
            headers = []
            for _ in range(n_headers):
                name, pos = _bytes(view, pos)
                if name is None:
                    raise BadBatch("a record header has a null key")
                header_value, pos = _bytes(view, pos)
                headers.append((name, header_value))
            if pos != start + length:
                raise BadBatch("a record's fields do not add up to its length")
            timestamp = base_ts + ts_delta
            if not _I64_MIN <= timestamp <= _I64_MAX:
                raise BadBatch("a record's timestamp is outside 64 bits")
            out.append(InRecord(offset_delta, timestamp, key, value, tuple(headers)))
    except IndexError:
        raise BadBatch("a record is truncated") from None
    if pos != len(view):
        raise BadBatch("a record batch has bytes past its last record")
    return out


def _varint(view: memoryview, pos: int) -> tuple[int, int]:
    """A zigzag varint (up to 64 bits)."""
    shift = 0
    raw = 0
    while True:
        byte = view[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise BadBatch("a varint is longer than 10 bytes")
    return (raw >> 1) ^ -(raw & 1), pos


def _bytes(view: memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = _varint(view, pos)
    if n < 0:
        return None, pos
    if pos + n > len(view):
        raise BadBatch("a record field runs past its record")
    return bytes(view[pos:pos + n]), pos + n


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

def _put_varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _put_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        _put_varint(out, -1)
    else:
        _put_varint(out, len(value))
        out += value


@dataclass(frozen=True, slots=True)
class OutRecord:
    offset: int
    timestamp: int  # ms
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[bytes, bytes | None], ...] = ()


def encode_batch(records: list[OutRecord]) -> bytes:
    """One uncompressed v2 batch of consecutive-or-gapped offsets (gaps are offset deltas),
    CreateTime, no producer."""
    base_offset = records[0].offset
    base_ts = records[0].timestamp
    body = bytearray()
    for r in records:
        rec = bytearray(b"\x00")
        _put_varint(rec, r.timestamp - base_ts)
        _put_varint(rec, r.offset - base_offset)
        _put_bytes(rec, r.key)
        _put_bytes(rec, r.value)
        _put_varint(rec, len(r.headers))
        for name, value in r.headers:
            _put_bytes(rec, name)
            _put_bytes(rec, value)
        _put_varint(body, len(rec))
        body += rec
    tail = struct.pack(">hiqqqhii", 0, records[-1].offset - base_offset, base_ts,
                       max(r.timestamp for r in records), -1, -1, -1, len(records)) + body
    crc = crc32c.crc32c(tail)
    head = struct.pack(">qiibI", base_offset, len(tail) + 9, 0, 2, crc)
    return head + tail

