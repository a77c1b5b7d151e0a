"""Reads by offset for the Kafka edge: a partition's records from an offset, each with the
Kafka fields stored beside its frame (core/engine/record_meta.py), up to a byte budget; and
the long poll of a Fetch, parked on the wake-ups pushes announce."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from core.engine import encryption, record_meta, segments
from core.engine.listener import WakeupHub
from core.storage import reads as sql
from core.storage.database import Database
from core.waiting import wait_event

UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
_SEGMENT_LIMIT = 64  # segments read per partition per look; the byte budget stops sooner
# A parked Fetch looks again at least this often, should a wake-up be lost (the LISTEN
# connection down).
_RECHECK_SECONDS = 1.0
_waiters = itertools.count()


@dataclass(slots=True)
class StoredRecord:
    offset: int
    payload: bytes  # the frame's JSON payload
    created_at: datetime  # its segment's append time
    meta: record_meta.RecordMeta | None  # None: pushed by a Queen client


@dataclass(frozen=True, slots=True)
class ReadEntry:
    """One partition to read from `offset` on, up to `max_bytes` of payload."""

    queue: str
    partition: str
    offset: int
    max_bytes: int


@dataclass(slots=True)
class PartitionRead:
    queue: str
    partition: str
    records: list[StoredRecord] = field(default_factory=list)
    high_watermark: int = 0
    log_start: int = 0
    error: str | None = None
    queue_id: int | None = None

    @property
    def size(self) -> int:
        return sum(len(r.payload) for r in self.records)


async def read_partition(db: Database, entry: ReadEntry) -> PartitionRead:
    """Records of one partition from `entry.offset`, up to its byte budget (at least one
    record when any is there and the budget is above 0)."""
    result = PartitionRead(entry.queue, entry.partition)
    async with db.session() as conn:
        state = await sql.fetch_partition_state(conn, queue=entry.queue,
                                                partition=entry.partition)
        if state is None:
            result.error = UNKNOWN_TOPIC_OR_PARTITION
            return result
        result.queue_id = state.queue_id
        if state.partition_id is None:  # a partition never written: an empty log
            return result
        assert state.last_offset is not None and state.log_start is not None
        result.high_watermark = state.last_offset + 1
        result.log_start = state.log_start
        if entry.offset < result.log_start or entry.offset > result.high_watermark:
            result.error = OFFSET_OUT_OF_RANGE
            return result
        if entry.offset == result.high_watermark or entry.max_bytes <= 0:
            return result
        rows = await sql.fetch_segments(conn, partition_id=state.partition_id,
                                        offset=entry.offset, limit=_SEGMENT_LIMIT)
    used = 0
    for row in rows:
        raw, metas = record_meta.split(encryption.opened(row.blob, entry.queue,
                                                         entry.partition))
        for i, frame in enumerate(segments.iter_frames(raw)):
            at = row.base_offset + i
            if at < entry.offset:
                continue
            size = len(frame.payload)
            if result.records and used + size > entry.max_bytes:
                return result
            used += size
            meta = metas[i] if metas is not None and i < len(metas) else None
            result.records.append(StoredRecord(at, frame.payload, row.created_at, meta))
    return result


async def read(db: Database, hub: WakeupHub, stop_waiting: asyncio.Event,
               entries: Sequence[ReadEntry], *, max_bytes: int, min_bytes: int,
               max_wait_ms: int) -> list[PartitionRead]:
    """Every entry, sharing `max_bytes`; while less than `min_bytes` came back and no entry
    failed, wait (up to `max_wait_ms`) for a push to one of the queues and read again."""
    deadline = time.monotonic() + max_wait_ms / 1000
    token = f"\x00kafka-fetch-{next(_waiters)}"  # a waiting line of its own
    queue_ids: set[int] = set()
    while True:
        with hub.parked(queue_ids or None, token) as waiter:
            results = await _read_all(db, entries, max_bytes)
            known = {r.queue_id for r in results if r.queue_id is not None}
            if (sum(r.size for r in results) >= min_bytes or any(r.error for r in results)
                    or stop_waiting.is_set() or not entries):
                return results
            left = deadline - time.monotonic()
            if left <= 0:
                return results
            if known != queue_ids:  # first look: now we know where to wait
                queue_ids = known
                hub.learnt(waiter, known)
            await _first(waiter.event, stop_waiting, min(left, _RECHECK_SECONDS))


async def _read_all(db: Database, entries: Sequence[ReadEntry],
                    max_bytes: int) -> list[PartitionRead]:
    out = []
    left = max_bytes
    for entry in entries:
        budget = min(entry.max_bytes, left)
        result = await read_partition(db, ReadEntry(entry.queue, entry.partition,
                                                    entry.offset, budget))
        left -= result.size
        out.append(result)
    return out


async def _first(event: asyncio.Event, other: asyncio.Event, seconds: float) -> None:
    if other.is_set():
        return
    await wait_event(event, seconds)
