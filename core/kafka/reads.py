"""Reads by offset for the Kafka edge: each partition's segments found as the offset reads of
`POST /api/v1/fetch` find them (core/engine/fetch.py), read as Kafka records
(core/kafka/stored.py), an offset past the high watermark out of range as Kafka has it, and
the long poll of a Fetch, parked on the wake-ups that pushes announce."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.engine.fetch import (
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_TOPIC_OR_PARTITION,
    FetchEntry,
    read_segments,
)
from core.engine.listener import WakeupHub
from core.kafka.stored import KafkaRecord, append_records
from core.storage.database import Database
from core.waiting import wait_event

__all__ = ["OFFSET_OUT_OF_RANGE", "UNKNOWN_TOPIC_OR_PARTITION", "FetchEntry", "KafkaRecord",
           "PartitionRead", "read", "read_partition"]

# A parked Fetch looks again at least this often, should a wake-up be lost (the LISTEN
# connection down).
_RECHECK_SECONDS = 1.0
_waiters = itertools.count()


@dataclass(slots=True)
class PartitionRead:
    """One partition's answer: its records from the offset asked, their payload bytes
    (what the budgets count), its bounds, or its error."""

    queue: str
    partition: str
    records: list[KafkaRecord] = field(default_factory=list)
    size: int = 0
    high_watermark: int = 0
    log_start: int = 0
    error: str | None = None
    queue_id: int | None = None  # the queue's id, when it exists


async def read_partition(db: Database, entry: FetchEntry) -> PartitionRead:
    """Records of one partition from `entry.offset`, up to its byte budget (at least one
    record when any is there and the budget is above 0); an offset below the log start or
    past the high watermark is OFFSET_OUT_OF_RANGE."""
    found, rows = await read_segments(db, queue=entry.queue, partition=entry.partition,
                                      offset=entry.offset, max_bytes=entry.max_bytes,
                                      tenant=entry.tenant)
    result = PartitionRead(entry.queue, entry.partition, high_watermark=found.high_watermark,
                           log_start=found.log_start, error=found.error,
                           queue_id=found.queue_id)
    if rows:
        result.size = append_records(result.records, rows, queue=entry.queue,
                                     partition=entry.partition, offset=entry.offset,
                                     max_bytes=entry.max_bytes)
    if result.error is None and entry.offset > result.high_watermark:
        result.error = OFFSET_OUT_OF_RANGE
    return result


async def read(db: Database, hub: WakeupHub, stop_waiting: asyncio.Event,
               entries: Sequence[FetchEntry], *, max_bytes: int, min_bytes: int,
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
            if not stop_waiting.is_set():
                await wait_event(waiter.event, min(left, _RECHECK_SECONDS))


async def _read_all(db: Database, entries: Sequence[FetchEntry],
                    max_bytes: int) -> list[PartitionRead]:
    out = []
    left = max_bytes
    for entry in entries:
        result = await read_partition(db, FetchEntry(entry.queue, entry.partition,
                                                     entry.offset, min(entry.max_bytes, left),
                                                     entry.tenant))
        left -= result.size
        out.append(result)
    return out
