"""Kafka record batches (broker/kafka/records.py) and the record side-car of segments
(core/engine/record_meta.py): round trips, and hostile input refused whole."""

from __future__ import annotations

import gzip
import struct

import cramjam
import crc32c
import lz4.frame
import pytest
import zstandard

from broker.kafka.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    BadBatch,
    OutRecord,
    decode_batches,
    encode_batch,
)
from core import segments
from core.engine import record_meta
from core.engine.writes import NewMessage
from core.ids import uuid7

RECORDS = [OutRecord(0, 1_700_000_000_123, b"k", b'{"a": 1}', ((b"h", b"1"), (b"h", None))),
           OutRecord(1, 1_700_000_000_100, None, None),
           OutRecord(2, 1_700_000_000_200, b"", b"\xff\x00binary")]


def _batch(records: list[OutRecord], codec: int = 0, *, producer: tuple[int, int, int] =
           (-1, -1, -1)) -> bytes:
    """A producer's batch: encode_batch's records section, compressed when asked."""
    plain = encode_batch(records)
    body = plain[61:]
    if codec == CODEC_GZIP:
        body = gzip.compress(body)
    elif codec == CODEC_SNAPPY:
        body = bytes(cramjam.snappy.compress_raw(body))
    elif codec == CODEC_LZ4:
        body = lz4.frame.compress(body)
    elif codec == CODEC_ZSTD:
        body = zstandard.ZstdCompressor().compress(body)
    fields = list(struct.unpack(">hiqqqhii", plain[21:61]))
    fields[0] = codec
    fields[4], fields[5], fields[6] = producer
    tail = struct.pack(">hiqqqhii", *fields) + body
    return struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, crc32c.crc32c(tail)) + tail


@pytest.mark.parametrize("codec", [0, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_batches_round_trip_with_every_codec(codec: int) -> None:
    [batch] = decode_batches(_batch(RECORDS, codec), max_bytes=1 << 20, max_records=100)
    assert [(r.timestamp, r.key, r.value, r.headers) for r in batch.records] == [
        (r.timestamp, r.key, r.value, r.headers) for r in RECORDS]


def test_xerial_framed_snappy_is_read() -> None:
    body = encode_batch(RECORDS)[61:]
    block = bytes(cramjam.snappy.compress_raw(body))
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    plain = encode_batch(RECORDS)
    fields = list(struct.unpack(">hiqqqhii", plain[21:61]))
    fields[0] = CODEC_SNAPPY
    tail = struct.pack(">hiqqqhii", *fields) + xerial
    data = struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, crc32c.crc32c(tail)) + tail
    [batch] = decode_batches(data, max_bytes=1 << 20, max_records=100)
    assert [r.value for r in batch.records] == [r.value for r in RECORDS]


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_a_decompression_bomb_is_refused_before_it_grows(codec: int) -> None:
    big = [OutRecord(0, 0, None, b"\x00" * (8 << 20))]
    data = _batch(big, codec)
    assert len(data) < 1 << 20  # small on the wire
    with pytest.raises(BadBatch, match="more than"):
        decode_batches(data, max_bytes=1 << 20, max_records=100)


def test_hostile_batches_are_refused() -> None:
    good = _batch(RECORDS)
    cases = {
        "truncated": good[:-3],
        "bad crc": good[:-1] + bytes([good[-1] ^ 1]),
        "magic 1": good[:16] + b"\x01" + good[17:],
        "huge length": good[:8] + struct.pack(">i", 2**31 - 1) + good[12:],
        "short header": good[:30],
    }
    for name, data in cases.items():
        with pytest.raises(BadBatch):
            decode_batches(data, max_bytes=1 << 20, max_records=100)
        assert name
    # A record count above what the request may hold is refused before anything is read.
    fields = list(struct.unpack(">hiqqqhii", good[21:61]))
    fields[-1] = 10**9
    tail = struct.pack(">hiqqqhii", *fields) + good[61:]
    lying = struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, crc32c.crc32c(tail)) + tail
    with pytest.raises(BadBatch, match="declares"):
        decode_batches(lying, max_bytes=1 << 20, max_records=1000)


@pytest.mark.parametrize("value", [b'{"a": [1, 2]}', b" 42 ", b"null", b"", b"plain text",
                                   b"caf\xc3\xa9 \x01", b"\xff\xfe\x00", None])
def test_values_keep_their_bytes_through_the_json_payload(value: bytes | None) -> None:
    payload, form = record_meta.stored_payload(value)
    import msgspec
    msgspec.json.decode(payload or b"null")  # always a JSON document
    meta = record_meta.RecordMeta(form, 5, None)
    assert record_meta.kafka_value(payload, meta) == value


def test_a_segment_with_a_side_car_reads_everywhere() -> None:
    """The side-car rides after the zstd frame: readers of frames see payloads only, the
    framed pop's decompression too, and `split` gives both."""
    meta = record_meta.RecordMeta(record_meta.FORM_TEXT, 123, b"key", ((b"h", b"v"),))
    messages = [NewMessage(uuid7(), "t1", b'"text"', kafka=meta),
                NewMessage(uuid7(), "t2", b"{}")]
    blob = segments.pack(messages) + record_meta.encode([m.kafka for m in messages])
    assert [f.payload for f in segments.unpack(blob)] == [b'"text"', b"{}"]
    assert not segments.is_one_zstd_frame(blob)
    assert [f.transaction_id for f in segments.iter_frames(segments.decompress(blob))] == [
        "t1", "t2"]
    _, metas = record_meta.split(blob)
    assert metas == [meta, None]
    assert record_meta.split(segments.pack(messages))[1] is None  # an old segment


def test_a_request_declaring_a_huge_array_is_refused_before_kio_reads_it() -> None:
    """kio reserves memory for the count an array declares; a native allocation failure
    aborts the process (the port's fuzzer found it: 183 GB asked). The guard refuses any
    count larger than the bytes left, and every well-formed request passes it."""
    from kio.index import load_request_schema

    from broker.kafka import guard, protocol
    from broker.kafka.protocol import Unreadable, read_request

    header = struct.pack(">hhih", 3, 1, 1, -1)  # Metadata v1, client id null
    with pytest.raises(Unreadable, match="elements in"):
        read_request(header + struct.pack(">i", 2**31 - 1) + b"\x00" * 8)
    with pytest.raises(Unreadable):
        read_request(struct.pack(">hhih", 0, 3, 1, -1) + struct.pack(">hhi", -1, 1, 1)
                     + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
                     + struct.pack(">i", 1) + struct.pack(">i", 0)
                     + struct.pack(">i", 2**31 - 1))  # records of 2 GiB, 0 bytes there
    import io

    from kio.serial import entity_writer
    for key, (low, high) in protocol.SUPPORTED.items():
        for version in range(low, high + 1):
            schema = load_request_schema(key, version)
            out = io.BytesIO()
            entity_writer(schema)(out, protocol.build(schema, {}))
            header = struct.pack(">hhih", key, version, 1, -1)
            if schema.__flexible__:
                header += b"\x00"
            data = header + out.getvalue()
            # An empty request of each version passes, unchanged.
            assert guard.readable(schema, data) is data


def test_a_timestamp_beyond_64_bits_is_refused() -> None:
    """base timestamp + delta past 2^63 would fail the side-car's encoding in the write
    path, failing the flush of every message beside it: refused at decoding instead."""
    from broker.kafka.records import _varint_bytes

    body = bytearray()
    for offset_delta, ts_delta in ((0, 0), (1, 100)):
        record = bytearray(b"\x00")
        record += _varint_bytes(ts_delta)
        record += _varint_bytes(offset_delta)
        record += _varint_bytes(-1)  # null key
        record += _varint_bytes(1)
        record += b"x"
        record += _varint_bytes(0)  # no headers
        body += _varint_bytes(len(record))
        body += record
    tail = struct.pack(">hiqqqhii", 0, 1, 2**63 - 10, 2**63 - 10, -1, -1, -1, 2) + body
    hostile = struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, crc32c.crc32c(tail)) + tail
    with pytest.raises(BadBatch, match="64 bits"):
        decode_batches(hostile, max_bytes=1 << 20, max_records=100)
