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
class Standby:
    """A standby streaming from the database server, and how far behind it replays."""

    standby: str  # its application_name (Patroni: the node's name)
    state: str
    sync_state: str
    lag_bytes: float | None  # None: the user may not read WAL positions
    lag_seconds: float


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


_KNOWN_PARTITIONS = Statement[int]("stats_known_partitions")
_FLUSH = Statement("stats_flush", Flushed)


async def flush(conn: Conn, *, partition_ids: Sequence[int], names: Sequence[str],
                deltas: Sequence[int], process: str, figures: str, role: str) -> Flushed:
    """Add counter deltas (those of partitions that do not exist are dropped), refresh the
    process's heartbeat and its row of the minute. Two statements: the directory is read
    apart, so that on Citus the write is a plain statement of the coordinator's tables."""
    asked = sorted({p for p in partition_ids if p})
    known = set(await _KNOWN_PARTITIONS.values(conn, partition_ids=asked)) if asked else set()
    kept = [i for i, p in enumerate(partition_ids) if not p or p in known]
    row = await _FLUSH.one(conn, partition_ids=[partition_ids[i] for i in kept],
                           names=[names[i] for i in kept], deltas=[deltas[i] for i in kept],
                           process=process, figures=figures, role=role)
    assert row is not None
    return row


_CLUSTER_COUNTERS = Statement("stats_cluster_counters", CounterValue)


async def cluster_counters(conn: Conn) -> list[CounterValue]:
    return await _CLUSTER_COUNTERS.rows(conn)


_LIVE_PROCESSES = Statement("stats_live_processes", ProcessRow)


async def live_processes(conn: Conn, *, seconds: float) -> list[ProcessRow]:
    return await _LIVE_PROCESSES.rows(conn, seconds=seconds)


_FORGET_PROCESSES = Statement[None]("stats_forget_processes")


async def forget_processes(conn: Conn, *, seconds: float) -> int:
    return await _FORGET_PROCESSES.run(conn, seconds=seconds)


_QUEUE_GAUGES = Statement("stats_queue_gauges", QueueGauges)


async def queue_gauges(conn: Conn) -> list[QueueGauges]:
    return await _QUEUE_GAUGES.rows(conn)


_REPLICATION = Statement("stats_replication", Standby)


async def standbys(conn: Conn) -> list[Standby]:
    return await _REPLICATION.rows(conn)


_LOCK = Statement[None]("stats_lock")


async def lock(conn: Conn, *, key: int) -> None:
    await _LOCK.value(conn, key=key)


@dataclass(frozen=True, slots=True)
class SampleFigures:
    """What a sampling pass read of the log: per queue, its cumulative figures now."""

    figures: str  # JSON text, one object per queue, handed back to `store_sample` unread
    orphans: list[int]  # partitions gone whose flushed counters remain


_SAMPLE_FIGURES = Statement[SampleFigures]("stats_sample_figures", SampleFigures)
_SAMPLE_STORE = Statement[None]("stats_sample_store")


async def sample_figures(conn: Conn, *, live_seconds: float) -> SampleFigures:
    """A sampling pass's reads; heartbeats younger than `live_seconds` count for the parked
    pops. Only reads: on Citus no statement both reads the log's distributed tables and
    writes the coordinator's stats tables."""
    return await _SAMPLE_FIGURES.single(conn, live_seconds=live_seconds)


async def store_sample(conn: Conn, figures: SampleFigures) -> int:
    """A sampling pass's writes (after `sample_figures`, in its transaction); answers the
    queue rows stored."""
    return int(await _SAMPLE_STORE.value(conn, figures=figures.figures, orphans=figures.orphans))


_TRIM = Statement[None]("stats_trim_samples")


async def trim_samples(conn: Conn, *, days: int, batch: int) -> int:
    return await _TRIM.run(conn, days=days, batch=batch)


_TRIM_MINUTES = Statement[None]("stats_trim_minutes")


async def trim_minutes(conn: Conn, *, days: int, batch: int) -> int:
    """Delete per-process minute rows older than `days`, at most `batch` of them."""
    return await _TRIM_MINUTES.run(conn, days=days, batch=batch)


_SERIES = Statement("stats_series", SeriesRow)


async def series(conn: Conn, *, tenant: str, unit: str, start: datetime, end: datetime,
                 queue: str | None, namespace: str | None, task: str | None) -> list[SeriesRow]:
    return await _SERIES.rows(conn, unit=unit, start=start, end=end, queue=queue,
                              namespace=namespace, task=task, tenant=tenant)


_SAFE_TIME = Statement[None]("stats_safe_time")
_CITUS_SAFE_TIME = Statement[None]("citus_safe_time")


async def safe_time(conn: Conn, *, citus: bool) -> datetime:
    """The start of the oldest transaction still open (or now): of every node on Citus."""
    value: datetime = await (_CITUS_SAFE_TIME if citus else _SAFE_TIME).value(conn)
    return value


_CHANGED = Statement("stats_changed_partitions", ChangedRow)


async def changed_partitions(conn: Conn, *, tenant: str, queue: str, since: datetime | None,
                             after: int | None, limit: int) -> list[ChangedRow]:
    return await _CHANGED.rows(conn, queue=queue, since=since, after=after, limit=limit,
                               tenant=tenant)
