"""Offset reads (`POST /api/v1/fetch`): records by offset, with no lease and no cursor."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from core import segments
from core.db import Database
from core.queries import QUERIES

UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
# Segments read per entry per call; the byte budget usually stops the read long before.
_SEGMENT_LIMIT = 64


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    transaction_id: str
    payload: bytes
    created_at: datetime
    producer_sub: str | None = None


@dataclass(slots=True)
class FetchResult:
    queue: str
    partition: str
    records: list[Record] = field(default_factory=list)
    high_watermark: int = 0
    log_start: int = 0
    error: str | None = None


async def fetch_entry(db: Database, *, queue: str, partition: str, offset: int,
                      max_bytes: int) -> FetchResult:
    """Records of one partition from `offset`, up to `max_bytes` of payload (at least one)."""
    result = FetchResult(queue, partition)
    state = await db.fetchrow("fetch_partition_state", queue, partition)
    if state is None:
        result.error = UNKNOWN_TOPIC_OR_PARTITION
        return result
    if state["partition_id"] is None:  # queue exists, partition never written: empty log
        return result
    result.high_watermark = state["last_offset"] + 1
    result.log_start = state["log_start"]
    if offset < result.log_start:
        result.error = OFFSET_OUT_OF_RANGE
        return result
    if offset >= result.high_watermark or max_bytes <= 0:
        return result
    used = 0
    rows = await db.fetch("fetch_segments", state["partition_id"], offset, _SEGMENT_LIMIT)
    for row in rows:
        for i, frame in enumerate(segments.unpack(row["blob"])):
            at = row["base_offset"] + i
            if at < offset:
                continue
            size = len(frame.payload)
            if result.records and used + size > max_bytes:
                return result
            used += size
            result.records.append(Record(at, frame.transaction_id, frame.payload,
                                         row["created_at"], frame.producer_sub))
    return result


async def frame_at(conn: asyncpg.Connection, partition_id: int,
                   offset: int) -> tuple[segments.Frame, datetime] | None:
    """The stored message at one offset and its append time; None once retention removed it.
    Takes a connection so callers inside a transaction (dead-lettering) read their own view."""
    row = await conn.fetchrow(QUERIES["segment_at"], partition_id, offset)
    if row is None:
        return None
    return segments.unpack(row["blob"])[offset - row["base_offset"]], row["created_at"]
