"""Offset reads (`POST /api/v1/fetch`): records by offset, with no lease and no cursor."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from core import segments
from core.engine import encryption, record_meta
from core.storage import reads as sql
from core.storage.database import Database

UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
# Segments read per entry per call; the byte budget usually stops the read long before.
_SEGMENT_LIMIT = 64
_FIRST_POLL_DELAY = 0.05
_MAX_POLL_DELAY = 0.5


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    transaction_id: str
    payload: bytes
    created_at: datetime
    producer_sub: str | None = None
    # The Kafka fields of a record produced through the Kafka edge (core/engine/record_meta.py)
    meta: record_meta.RecordMeta | None = None


@dataclass(frozen=True, slots=True)
class FetchEntry:
    """One partition to read from `offset` on, up to `max_bytes` of payload."""

    queue: str
    partition: str
    offset: int
    max_bytes: int
    tenant: str = ""  # the queue's tenant (core/tenancy)


@dataclass(slots=True)
class FetchResult:
    queue: str
    partition: str
    records: list[Record] = field(default_factory=list)
    high_watermark: int = 0
    log_start: int = 0
    error: str | None = None
    queue_id: int | None = None  # the queue's id, when it exists


async def fetch(db: Database, entries: Sequence[FetchEntry], *, max_bytes: int,
                max_wait_ms: int) -> list[FetchResult]:
    """Read every entry (sharing a budget of `max_bytes`); when nothing is there yet, poll
    with a short backoff for up to `max_wait_ms`."""
    # Nothing asked for, nothing to wait for.
    deadline = time.monotonic() + (max_wait_ms / 1000 if entries else 0)
    delay = _FIRST_POLL_DELAY
    while True:
        results = []
        remaining = max_bytes
        for entry in entries:
            result = await fetch_entry(db, tenant=entry.tenant, queue=entry.queue,
                                       partition=entry.partition, offset=entry.offset,
                                       max_bytes=min(entry.max_bytes, remaining))
            remaining -= sum(len(r.payload) for r in result.records)
            results.append(result)
        if any(r.records or r.error for r in results) or time.monotonic() >= deadline:
            return results
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, _MAX_POLL_DELAY)


async def fetch_entry(db: Database, *, queue: str, partition: str, offset: int,
                      max_bytes: int, tenant: str = "") -> FetchResult:
    """Records of one partition of a queue of `tenant` from `offset`, up to `max_bytes` of
    payload (at least one)."""
    result = FetchResult(queue, partition)
    async with db.session() as conn:
        state = await sql.fetch_partition_state(conn, tenant=tenant, queue=queue,
                                                partition=partition)
        if state is None:
            result.error = UNKNOWN_TOPIC_OR_PARTITION
            return result
        result.queue_id = state.queue_id
        if state.partition_id is None:  # queue exists, partition never written: empty log
            return result
        assert state.last_offset is not None and state.log_start is not None
        result.high_watermark = state.last_offset + 1
        result.log_start = state.log_start
        if offset < result.log_start:
            result.error = OFFSET_OUT_OF_RANGE
            return result
        if offset >= result.high_watermark or max_bytes <= 0:
            return result
        rows = await sql.fetch_segments(conn, partition_id=state.partition_id, offset=offset,
                                        limit=_SEGMENT_LIMIT)
    used = 0
    for row in rows:
        raw, metas = record_meta.split(encryption.opened(row.blob, queue, partition))
        for i, frame in enumerate(segments.iter_frames(raw)):
            at = row.base_offset + i
            if at < offset:
                continue
            size = len(frame.payload)
            if result.records and used + size > max_bytes:
                return result
            used += size
            result.records.append(Record(at, frame.transaction_id, frame.payload,
                                         row.created_at, frame.producer_sub,
                                         metas[i] if metas and i < len(metas) else None))
    return result
