"""The Kafka record codecs that every produced and fetched record passes through
(broker/kafka/records.py, core/engine/record_meta.py) are written for speed; here they are
held to a plain reference codec, one varint at a time as the format describes them:
byte-identical batches out, the same records in, and, for damaged input, a refusal
exactly where the reference refuses."""

from __future__ import annotations

import random
import struct

import crc32c
import pytest

from broker.kafka.records import BadBatch, InRecord, OutRecord, decode_batches, encode_batch
from core.engine import record_meta
from core.errors import SegmentError
from core.kafka.messages import produced

Header = tuple[bytes, bytes | None]
Record = tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]


# --- the reference codec --------------------------------------------------------------------

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


def reference_batch(records: list[Record]) -> bytes:
    """An uncompressed v2 batch, field by field (offset, timestamp, key, value, headers)."""
    base_offset, base_ts = records[0][0], records[0][1]
    body = bytearray()
    for offset, timestamp, key, value, headers in records:
        rec = bytearray(b"\x00")
        _put_varint(rec, timestamp - base_ts)
        _put_varint(rec, offset - base_offset)
        _put_bytes(rec, key)
        _put_bytes(rec, value)
        _put_varint(rec, len(headers))
        for name, header_value in headers:
            _put_bytes(rec, name)
            _put_bytes(rec, header_value)
        _put_varint(body, len(rec))
        body += rec
    tail = struct.pack(">hiqqqhii", 0, records[-1][0] - base_offset, base_ts,
                       max(r[1] for r in records), -1, -1, -1, len(records)) + body
    return struct.pack(">qiibI", base_offset, len(tail) + 9, 0, 2, crc32c.crc32c(tail)) + tail


def _get_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = raw = 0
    while True:
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _get_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _get_varint(data, pos)
    if n < 0:
        return None, pos
    if pos + n > len(data):
        raise ValueError("field past the body")
    return data[pos:pos + n], pos + n


def reference_records(body: bytes, count: int, base_ts: int) -> list[Record] | None:
    """A batch body's records as (offset delta, timestamp, key, value, headers), or None
    where the format's rules refuse it."""
    out: list[Record] = []
    pos = 0
    try:
        for expected in range(count):
            length, pos = _get_varint(body, pos)
            start = pos
            if length < 0 or start + length > len(body):
                return None
            pos += 1
            ts_delta, pos = _get_varint(body, pos)
            delta, pos = _get_varint(body, pos)
            if delta != expected:
                return None
            key, pos = _get_bytes(body, pos)
            value, pos = _get_bytes(body, pos)
            n, pos = _get_varint(body, pos)
            if n < 0 or n > length:
                return None
            headers = []
            for _ in range(n):
                name, pos = _get_bytes(body, pos)
                if name is None:
                    return None
                header_value, pos = _get_bytes(body, pos)
                headers.append((name, header_value))
            if pos != start + length:
                return None
            timestamp = base_ts + ts_delta
            if not -(2**63) <= timestamp < 2**63:
                return None
            out.append((delta, timestamp, key, value, tuple(headers)))
    except (IndexError, ValueError):
        return None
    return out if pos == len(body) else None


# --- records of every shape ------------------------------------------------------------------

def _maybe_bytes(rng: random.Random, big: bool = False) -> bytes | None:
    if rng.random() < 0.15:
        return None
    size = rng.choice([0, 1, 63, 64, 127, 128, 1000, 8191, 8192, 20_000] if big else [0, 1, 5, 70])
    return rng.randbytes(size)


def random_records(rng: random.Random, n: int) -> list[Record]:
    offset = rng.choice([0, 7, 2**40])
    timestamp = rng.choice([0, 1_700_000_000_000, -5])
    out: list[Record] = []
    for _ in range(n):
        headers = tuple((rng.randbytes(rng.choice([0, 3, 200])), _maybe_bytes(rng))
                        for _ in range(rng.choice([0, 0, 0, 1, 3])))
        out.append((offset, timestamp, _maybe_bytes(rng), _maybe_bytes(rng, big=True), headers))
        offset += rng.choice([1, 1, 1, 2, 100, 70_000])  # gaps are offset deltas
        timestamp += rng.choice([0, 1, -1, 3, 1000, -100_000, 2**40])
    return out


@pytest.mark.parametrize("seed", range(40))
def test_encoded_batches_are_the_reference_bytes(seed: int) -> None:
    rng = random.Random(seed)
    records = random_records(rng, rng.choice([1, 2, 10, 100]))
    assert encode_batch([OutRecord(*r) for r in records]) == reference_batch(records)


@pytest.mark.parametrize("seed", range(40))
def test_decoded_records_are_what_was_encoded(seed: int) -> None:
    rng = random.Random(seed)
    records = random_records(rng, rng.choice([1, 2, 10, 100]))
    # A producer's batch has offset deltas 0..n-1.
    records = [(i, *r[1:]) for i, r in enumerate(records)]
    [batch] = decode_batches(reference_batch(records), max_bytes=1 << 30, max_records=1000)
    assert [(r.offset_delta, r.timestamp, r.key, r.value, r.headers)
            for r in batch.records] == records


def _with_body(batch: bytes, body: bytes) -> bytes:
    """`batch` with its records section replaced (and the CRC made to match)."""
    tail = batch[21:61] + body
    return struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, crc32c.crc32c(tail)) + tail


@pytest.mark.parametrize("seed", range(30))
def test_damaged_records_are_refused_where_the_reference_refuses(seed: int) -> None:
    """Bytes changed, cut or added inside the records (behind a CRC that matches, as a
    hostile client would send): taken exactly when the reference takes them, and then as
    the same records."""
    rng = random.Random(seed)
    records = [(i, *r[1:]) for i, r in enumerate(random_records(rng, rng.choice([1, 3, 20])))]
    batch = reference_batch(records)
    body = batch[61:]
    count, base_ts = len(records), struct.unpack_from(">q", batch, 27)[0]
    for _ in range(60):
        damaged = bytearray(body)
        how = rng.randrange(3)
        at = rng.randrange(len(damaged))
        if how == 0:
            damaged[at] = rng.randrange(256)
        elif how == 1:
            del damaged[at:at + rng.choice([1, 2, 9])]
        else:
            damaged[at:at] = rng.randbytes(rng.choice([1, 2]))
        expected = reference_records(bytes(damaged), count, base_ts)
        data = _with_body(batch, bytes(damaged))
        if expected is None:
            with pytest.raises(BadBatch):
                decode_batches(data, max_bytes=1 << 30, max_records=1000)
        else:
            [got] = decode_batches(data, max_bytes=1 << 30, max_records=1000)
            assert [(r.offset_delta, r.timestamp, r.key, r.value, r.headers)
                    for r in got.records] == expected


def _record(*fields: int | bytes) -> bytes:
    """A record from its fields after the attributes: ints are varints, bytes as they are."""
    rec = bytearray(b"\x00")
    for f in fields:
        if isinstance(f, int):
            _put_varint(rec, f)
        else:
            rec += f
    out = bytearray()
    _put_varint(out, len(rec))
    return bytes(out + rec)


@pytest.mark.parametrize(("name", "body"), [
    ("a header count of -1", _record(0, 0, 1, b"k", 1, b"v", -1)),
    ("two headers declared, one there", _record(0, 0, 1, b"k", 1, b"v", 2, 1, b"h", 1, b"x")),
    ("a null header key", _record(0, 0, 1, b"k", 1, b"v", 1, -1, 1, b"x")),
    ("a key past its record", _record(0, 0, 9, b"k", 1, b"v", 0)),
    ("a value past its record", _record(0, 0, -1, 40, b"v", 0)),
    ("a first offset delta of 1", _record(0, 1, -1, -1, 0)),
    ("a varint of 11 bytes", _record(0, 0, -1, -1, b"\xff" * 10 + b"\x01")),
    ("an empty record", b"\x00"),
    ("bytes past the last record", _record(0, 0, -1, -1, 0) + b"\x00"),
])
def test_hand_made_damage_is_refused(name: str, body: bytes) -> None:
    batch = reference_batch([(0, 10, None, b"{}", ())])
    assert reference_records(body, 1, 10) is None, name
    with pytest.raises(BadBatch):
        decode_batches(_with_body(batch, body), max_bytes=1 << 30, max_records=1000)


# --- the segments' side-car -------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(20))
def test_the_side_car_reads_back_what_was_written(seed: int) -> None:
    rng = random.Random(seed)
    metas: list[record_meta.RecordMeta | None] = []
    for _ in range(rng.choice([1, 5, 100])):
        if rng.random() < 0.2:
            metas.append(None)
            continue
        headers = tuple((rng.randbytes(rng.choice([0, 4])), _maybe_bytes(rng))
                        for _ in range(rng.choice([0, 0, 2])))
        metas.append(record_meta.RecordMeta(rng.randrange(4), rng.randrange(-2**63, 2**63),
                                            _maybe_bytes(rng), headers))
    frame = record_meta.encode(metas)
    assert record_meta.decode(frame[8:]) == metas


def test_a_truncated_side_car_is_refused() -> None:
    meta = record_meta.RecordMeta(0, 5, b"key", ((b"h", b"v"),))
    body = record_meta.encode([meta, meta])[8:]
    for cut in range(9, len(body)):
        try:
            got = record_meta.decode(body[:cut])
        except SegmentError:
            continue
        # Only a cut inside the last header's value goes unnoticed (as it always did: the
        # side-car is the broker's own writing, behind the segment's checks).
        assert got[0] == meta and len(got) == 2 and cut == len(body) - 1


# --- records as pushes -------------------------------------------------------------------------

@pytest.mark.parametrize("value", [b'{"a": [1, 2]}', b" 42 ", b"null", b"", b"plain text",
                                   b"1e999", b"[" * 5000 + b"]" * 5000, b'"\xff"',
                                   b"caf\xc3\xa9 \x01", b"\xff\xfe\x00", None])
def test_a_produced_record_is_stored_as_stored_payload_says(value: bytes | None) -> None:
    """The push of a produced record inlines `stored_payload`'s common case (a JSON value):
    every value still takes the payload and form that `stored_payload` gives it."""
    record = InRecord(0, 7, b"k", value, ((b"h", None),))
    [item] = produced("t", "0", [record], transaction_ids=None, producer_sub="me", tenant="x")
    payload, form = record_meta.stored_payload(value)
    message = item.message
    assert (message.payload, message.kafka) == (
        payload, record_meta.RecordMeta(form, 7, b"k", ((b"h", None),)))
    assert message.transaction_id == str(message.message_id)
    assert (item.queue, item.partition, item.tenant, message.producer_sub) == (
        "t", "0", "x", "me")


def test_produced_records_take_the_transaction_ids_given_and_increasing_ids() -> None:
    records = [InRecord(i, 7, None, b"{}", ()) for i in range(5)]
    items = produced("t", "0", records, transaction_ids=[f"s{i}" for i in range(5)],
                     producer_sub=None, tenant="")
    assert [i.message.transaction_id for i in items] == ["s0", "s1", "s2", "s3", "s4"]
    ids = [i.message.message_id for i in items]
    assert ids == sorted(ids) and len(set(ids)) == 5
