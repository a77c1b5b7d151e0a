"""Typed calls of the observability statements (schema/queries/stats.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.storage.statements import Conn, Statement


@dataclass(frozen=True, slots=True)
class CounterValue:
    name: str
    value: int


@dataclass(frozen=True, slots=True)
class Flushed:
    written: int
    requests: int  # cluster totals before this flush's deltas
    messages: int


@dataclass(frozen=True, slots=True)
class ProcessRow:
    process: str
    started_at: datetime
    seen_at: datetime
    figures: str  # JSON text
    db_now: datetime


@dataclass(frozen=True, slots=True)
class QueueGauges:
    id: int
    name: str
    dead_letters: int
    lag_ms: float
    tenant: str = ""  # the queue's tenant (core/tenancy)


@dataclass(frozen=True, slots=True)
class SeriesRow:
    at: datetime
    pushed: int
    delivered: int
    acked: int
    failed: int
    dead_lettered: int
    depth: int
    lag_seconds: float


@dataclass(frozen=True, slots=True)
class ChangedRow:
    queue_id: int
    id: int | None  # None: the queue exists but no partition matched
    name: str | None
    last_offset: int | None
    log_start: int | None
    last_write_at: datetime | None


_FLUSH = Statement("stats_flush", Flushed)
_CLUSTER_COUNTERS = Statement("stats_cluster_counters", CounterValue)
_LIVE_PROCESSES = Statement("stats_live_processes", ProcessRow)
_FORGET_PROCESSES = Statement[None]("stats_forget_processes")
_QUEUE_GAUGES = Statement("stats_queue_gauges", QueueGauges)
_LOCK = Statement[None]("stats_lock")
_SAMPLE = Statement[None]("stats_sample")
_TRIM = Statement[None]("stats_trim_samples")
_SERIES = Statement("stats_series", SeriesRow)
_SAFE_TIME = Statement[None]("stats_safe_time")
_CHANGED = Statement("stats_changed_partitions", ChangedRow)


async def flush(conn: Conn, *, partition_ids: Sequence[int], names: Sequence[str],
                deltas: Sequence[int], process: str, figures: str) -> Flushed:
    """Add counter deltas and refresh the process's heartbeat."""
    row = await _FLUSH.one(conn, list(partition_ids), list(names), list(deltas), process,
                           figures)
    assert row is not None
    return row


async def cluster_counters(conn: Conn) -> list[CounterValue]:
    return await _CLUSTER_COUNTERS.rows(conn)


async def live_processes(conn: Conn, *, seconds: float) -> list[ProcessRow]:
    return await _LIVE_PROCESSES.rows(conn, seconds)


async def forget_processes(conn: Conn, *, seconds: float) -> int:
    return await _FORGET_PROCESSES.run(conn, seconds)


async def queue_gauges(conn: Conn) -> list[QueueGauges]:
    return await _QUEUE_GAUGES.rows(conn)


async def lock(conn: Conn, *, key: int) -> None:
    await _LOCK.value(conn, key)


async def sample(conn: Conn) -> int:
    """One sampling pass; answers the queue rows stored."""
    return int(await _SAMPLE.value(conn))


async def trim_samples(conn: Conn, *, days: int, batch: int) -> int:
    return await _TRIM.run(conn, days, batch)


async def series(conn: Conn, *, tenant: str, unit: str, start: datetime, end: datetime,
                 queue: str | None, namespace: str | None, task: str | None) -> list[SeriesRow]:
    return await _SERIES.rows(conn, unit, start, end, queue, namespace, task, tenant)


async def safe_time(conn: Conn) -> datetime:
    value: datetime = await _SAFE_TIME.value(conn)
    return value


async def changed_partitions(conn: Conn, *, tenant: str, queue: str, since: datetime | None,
                             after: int | None, limit: int) -> list[ChangedRow]:
    return await _CHANGED.rows(conn, queue, since, after, limit, tenant)
