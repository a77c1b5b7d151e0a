"""A Fetch reads stored segments as Kafka records in one pass over frames and side-car
(core/kafka/stored.py). Here that pass is held to the plain way: every frame decoded
(core/segments.py), the side-car decoded whole (core/engine/record_meta.py), the budget
counted as `POST /api/v1/fetch` counts it, and each value turned back as `kafka_value` says:
the same records, from any offset, under any budget, for segments mixing records with and
without Kafka fields, null payloads, traces, producers and headers."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import zstandard

from core import segments
from core.engine import record_meta
from core.engine.writes import NewMessage
from core.errors import SegmentError
from core.ids import uuid7
from core.kafka.stored import KafkaRecord, append_records
from core.storage.reads import RangeRow

_VALUES = [b'{"a": [1, 2]}', b"42", b"", b"plain text", b"caf\xc3\xa9", b"\xff\xfe\x00",
           b"x" * 300, None]


def _message(rng: random.Random, i: int) -> NewMessage:
    trace = uuid.UUID(int=rng.getrandbits(128)) if rng.random() < 0.2 else None
    sub = rng.choice([None, None, "producer-1"])
    if rng.random() < 0.3:  # a Queen client's message: no Kafka fields
        payload = rng.choice([b'{"n": %d}' % i, b""])  # b"": the null payload
        return NewMessage(uuid7(), f"t{i}", payload, trace, sub)
    value = rng.choice(_VALUES)
    payload, form = record_meta.stored_payload(value)
    headers = tuple((rng.randbytes(rng.choice([1, 5])), rng.choice([None, b"", b"hv"]))
                    for _ in range(rng.choice([0, 0, 1, 3])))
    # timestamps near each other (small deltas, some going back) or anywhere (long varints)
    timestamp = rng.choice([rng.randrange(0, 2**41), 1_796_000_000_000 + rng.randrange(-5, 9000)])
    meta = record_meta.RecordMeta(form, timestamp,
                                  rng.choice([None, b"", b"key-%d" % i]), headers)
    return NewMessage(uuid7(), f"t{i}", payload, trace, sub, kafka=meta)


def _rows(rng: random.Random) -> list[RangeRow]:
    """A partition's segments from offset 10, some with a side-car, one with a gap after
    it; the side-car may be shorter than the frames (entries missing: no Kafka fields)."""
    rows = []
    base = 10
    at = datetime(2026, 12, 6, 12, 0, 0, 123000, tzinfo=UTC)
    for _ in range(rng.randrange(1, 5)):
        messages = [_message(rng, base + i) for i in range(rng.randrange(1, 12))]
        blob = segments.pack(messages)
        metas = [m.kafka for m in messages]
        if any(metas):
            blob += record_meta.encode(metas[:rng.choice([len(metas), len(metas) - 1])])
        rows.append(RangeRow(base, base + len(messages) - 1, at, blob))
        base += len(messages) + rng.choice([0, 0, 3])
        at += timedelta(milliseconds=rng.randrange(1, 5000))
    return rows


def reference(rows: list[RangeRow], offset: int, max_bytes: int) -> list[KafkaRecord]:
    """The records the plain way: decoded frames, a decoded side-car, `kafka_value`."""
    out: list[KafkaRecord] = []
    used = 0
    for row in rows:
        if row.last_offset < offset:
            continue
        raw, metas = record_meta.split(row.blob)
        first = max(0, offset - row.base_offset)
        for index, frame in enumerate(segments.iter_frames(raw), start=0):
            if index < first:
                continue
            size = len(frame.payload)
            if out and used + size > max_bytes:
                return out
            used += size
            meta = metas[index] if metas and index < len(metas) else None
            if meta is None:
                out.append((row.base_offset + index, int(row.created_at.timestamp() * 1000),
                            None, frame.payload, ()))
            else:
                out.append((row.base_offset + index, meta.timestamp_ms, meta.key,
                            record_meta.kafka_value(frame.payload, meta), meta.headers))
    return out


@pytest.mark.parametrize("seed", range(200))
def test_the_one_pass_reads_what_the_plain_way_reads(seed: int) -> None:
    rng = random.Random(seed)
    rows = _rows(rng)
    offset = rng.randrange(10, rows[-1].last_offset + 1)
    max_bytes = rng.choice([1, 40, 500, 1 << 20])
    got: list[KafkaRecord] = []
    used = append_records(got, rows, queue="q", partition="0", offset=offset,
                          max_bytes=max_bytes)
    expected = reference(rows, offset, max_bytes)
    assert got == expected
    assert used == _payload_bytes(rows, offset, len(got))


def _payload_bytes(rows: list[RangeRow], offset: int, count: int) -> int:
    """The budget used by the first `count` records from `offset`, counted on Frames."""
    sizes = [len(frame.payload) for row in rows if row.last_offset >= offset
             for index, frame in enumerate(segments.iter_frames(segments.decompress(row.blob)))
             if row.base_offset + index >= offset]
    return sum(sizes[:count])


def test_a_frame_running_past_its_segment_is_refused() -> None:
    messages = [NewMessage(uuid7(), "t1", b'{"a": 1}'), NewMessage(uuid7(), "t2", b"[]")]
    raw = segments.decompress(segments.pack(messages))
    blob = zstandard.ZstdCompressor().compress(raw[:-1])  # the last frame cut short
    row = RangeRow(0, 1, datetime.now(UTC), blob)
    with pytest.raises(SegmentError):
        append_records([], [row], queue="q", partition="0", offset=0, max_bytes=1 << 20)
