"""A partition's stored segments read back as Kafka records, in one pass over each segment's
frames and its side-car of Kafka fields (core/engine/record_meta.py) together.

A Fetch answers every record it reads, so this is the listener's per-record work: no Record
or RecordMeta is built, no message id or transaction id is decoded, and each record becomes
the one tuple the batch encoder takes (offset, timestamp ms, key, value, headers). The
records are the ones `POST /api/v1/fetch` reads (core/engine/fetch.py) from the same offset
with the same byte budget; tests/unit/test_kafka_stored.py holds the two to each other.
"""

from __future__ import annotations

import struct
from datetime import datetime

from core import segments
from core.engine import encryption, record_meta
from core.errors import SegmentError
from core.storage.reads import RangeRow

KafkaRecord = tuple[int, int, bytes | None, bytes | None, tuple[record_meta.Header, ...]]

_NULL_PAYLOAD = b"null"  # the stored b"" reads as JSON null, as HTTP reads give it


def append_records(out: list[KafkaRecord], rows: list[RangeRow], *, queue: str,
                   partition: str, offset: int, max_bytes: int) -> int:
    """Append the records of `rows` (a partition's segments in offset order) from `offset`
    while their payloads fit `max_bytes` (at least one record); answer the bytes used."""
    used = 0
    for row in rows:
        if row.last_offset < offset:  # a segment before a gap: nothing of it is asked
            continue
        raw, side_car = record_meta.split_raw(encryption.opened(row.blob, queue, partition))
        used, full = _segment(out, raw, side_car, max(0, offset - row.base_offset),
                              row.base_offset, _millis(row.created_at), used, max_bytes)
        if full:
            break
    return used


def _millis(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def _segment(out: list[KafkaRecord], raw: bytes, side_car: bytes | None, first: int,
             base_offset: int, created_ms: int, used: int, max_bytes: int
             ) -> tuple[int, bool]:
    """Frames `first`.. of one segment: the bytes used so far, and whether the budget ended
    the read. Written for speed (every record read by a Fetch passes here)."""
    end = len(raw)
    pos = segments.past_frames(raw, 0, first) if first else 0
    n_metas = meta_pos = 0
    metas = b""  # the side-car's bytes; records from `n_metas` on have no entry
    if side_car is not None:
        metas = side_car
        n_metas, meta_pos = record_meta.entries(metas)
        if first:
            meta_pos = record_meta.skip_entries(metas, meta_pos, min(first, n_metas))
    index = first
    at = base_offset + first
    head = segments.FRAME_LENGTH_AND_FLAGS.unpack_from
    head_size = segments.FRAME_HEAD_SIZE
    trace_flag, producer_flag = segments.FLAG_TRACE, segments.FLAG_PRODUCER
    read_entry = record_meta.read_entry
    json_form = record_meta.FORM_JSON
    add = out.append
    try:
        while pos < end:
            body_len, flags = head(raw, pos)
            stop = pos + 4 + body_len
            field = pos + head_size  # past the message id
            if flags & trace_flag:
                field += 16
            field += 2 + (raw[field] | raw[field + 1] << 8)  # the transaction id
            if flags & producer_flag:
                field += 2 + (raw[field] | raw[field + 1] << 8)
            if stop > end or field > stop:
                raise SegmentError("frame runs past the end of the segment")
            if field < stop:
                payload = raw[field:stop]
                size = stop - field
            else:  # b"": the null payload
                payload = _NULL_PAYLOAD
                size = 4
            if out and used + size > max_bytes:
                return used, True
            used += size
            if index < n_metas:
                if metas[meta_pos]:
                    form, timestamp, key, headers, meta_pos = read_entry(metas, meta_pos)
                    add((at, timestamp, key,
                         payload if form == json_form else record_meta.value_of(payload, form),
                         headers))
                else:
                    meta_pos += 1
                    add((at, created_ms, None, payload, ()))
            else:
                add((at, created_ms, None, payload, ()))
            pos = stop
            index += 1
            at += 1
    except (struct.error, IndexError) as exc:
        raise SegmentError(f"malformed frame or record metadata: {exc}") from exc
    return used, False
