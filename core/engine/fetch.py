"""Offset reads (`POST /api/v1/fetch`): records by offset, with no lease and no cursor.

A partition is read by id (its id learned once: core/engine/directory.py), so that on Citus
each statement goes to the partition's shard alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from core import segments
from core.engine import encryption, record_meta
from core.engine.directory import DIRECTORY, PartitionName
from core.errors import SegmentError
from core.storage import reads as sql
from core.storage.database import Database

UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
# Segments read per entry per call, at most; the byte budget usually stops the read sooner
# (schema/queries/read.sql: fetch_segments).
_SEGMENT_LIMIT = 64
_FIRST_POLL_DELAY = 0.05
_MAX_POLL_DELAY = 0.5


# One per record read: msgspec builds a Struct in C (a frozen dataclass's __init__ costs
# several times more).
class Record(msgspec.Struct, frozen=True, gc=False):
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
    result, rows = await read_segments(db, queue=queue, partition=partition, offset=offset,
                                       max_bytes=max_bytes, tenant=tenant)
    used = 0
    records = result.records
    try:
        for row in rows:
            if row.last_offset < offset:  # a segment before a gap: nothing of it is asked
                continue
            raw, metas = record_meta.split(encryption.opened(row.blob, queue, partition))
            # The frames' parts, not Frames: a record has no use for the message id, so
            # it is not decoded; frames before `offset` are stepped over by length.
            first = max(0, offset - row.base_offset)
            at = row.base_offset + first
            n_metas = len(metas) if metas else 0
            for _mid, _trace, txid, sub, payload in segments.iter_frame_parts(raw, first):
                size = len(payload) if payload else 4  # b"" is the null payload
                if records and used + size > max_bytes:
                    return result
                used += size
                index = at - row.base_offset
                records.append(Record(at, txid.decode(), payload or b"null", row.created_at,
                                      None if sub is None else sub.decode(),
                                      metas[index] if metas and index < n_metas else None))
                at += 1
    except UnicodeDecodeError as exc:
        raise SegmentError(f"malformed frame: {exc}") from exc
    return result


async def read_segments(db: Database, *, queue: str, partition: str, offset: int,
                        max_bytes: int, tenant: str = "") -> tuple[FetchResult,
                                                                   list[sql.RangeRow]]:
    """A partition's bounds (a FetchResult with no records yet, or its error) and the
    stored segments that hold offsets from `offset` on (none when nothing is to be read):
    what `fetch_entry` decodes into Records, and the Kafka edge into its records
    (core/kafka/stored.py)."""
    result = FetchResult(queue, partition)
    name = PartitionName(queue, partition, tenant)
    async with db.session() as conn:
        for _ in range(2):  # a remembered id may be stale: then once more, looked up
            found = await DIRECTORY.look_up(conn, name)
            if found is None:
                result.error = UNKNOWN_TOPIC_OR_PARTITION
                return result, []
            result.queue_id, partition_id = found
            if partition_id is None:  # queue exists, partition never written: empty log
                return result, []
            head = await sql.fetch_head(conn, partition_id=partition_id)
            if head is not None and (head.tenant, head.queue, head.partition) == (
                    tenant, queue, partition):
                break
            DIRECTORY.forget(name)
        else:
            return result, []  # deleted as it was read: an empty log
        result.high_watermark = head.last_offset + 1
        result.log_start = head.log_start
        if offset < result.log_start:
            result.error = OFFSET_OUT_OF_RANGE
            return result, []
        if offset >= result.high_watermark or max_bytes <= 0:
            return result, []
        rows = await sql.fetch_segments(conn, partition_id=partition_id, offset=offset,
                                        limit=_SEGMENT_LIMIT, max_bytes=max_bytes)
    return result, rows
