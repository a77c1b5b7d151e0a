"""Typed calls of the analytics family's reads (schema/queries/history.sql)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from core.storage.statements import Conn, Statement


@dataclass(frozen=True, slots=True)
class ProcessBucket:
    """One process over one bucket: its counters (JSON text) and its gauges."""

    process: str
    role: str
    started_at: datetime
    bucket: datetime
    minutes: int
    flushes: int
    counters: str
    cpu_user_avg: float
    cpu_user_min: int
    cpu_user_max: int
    cpu_user_last: int
    cpu_system_avg: float
    cpu_system_min: int
    cpu_system_max: int
    cpu_system_last: int
    rss_avg: float
    rss_min: int
    rss_max: int
    rss_last: int
    pool_capacity: int
    pool_open_avg: float
    pool_open_min: int
    pool_open_max: int
    pool_open_last: int
    pool_idle_avg: float
    pool_idle_min: int
    pool_active_max: int
    parked_avg: float
    parked_max: int
    parked_last: int
    spool_pending_max: int
    spool_pending_last: int


@dataclass(frozen=True, slots=True)
class ProcessSpan:
    """One process over the whole window."""

    process: str
    role: str
    started_at: datetime
    first_minute: datetime
    last_minute: datetime
    alive: bool
    counters: str
    pool_idle_min: int
    pool_open_max: int


@dataclass(frozen=True, slots=True)
class QueueBucket:
    """One queue over one bucket, from its sample rows."""

    bucket: datetime
    queue: str
    tenant: str  # the queue's (core/tenancy); '' the default tenant
    samples: int
    pushed: int
    delivered: int
    acked: int
    failed: int
    dead_lettered: int
    depth: int
    partitions: int
    lag_avg: float
    lag_max: float
    parked_avg: float
    evicted: int
    retention_released: int
    completed_released: int
    retention_segments: int


_PROCESS_BUCKETS = Statement("history_process_buckets", ProcessBucket)


async def process_buckets(conn: Conn, *, start: datetime, end: datetime, minutes: int,
                          hostname: str | None, pid: int | None) -> list[ProcessBucket]:
    return await _PROCESS_BUCKETS.rows(conn, start=start, end=end, minutes=minutes,
                                       hostname=hostname, pid=pid)


_PROCESSES = Statement("history_processes", ProcessSpan)


async def processes(conn: Conn, *, start: datetime, end: datetime,
                    live_seconds: float) -> list[ProcessSpan]:
    return await _PROCESSES.rows(conn, start=start, end=end, live_seconds=live_seconds)


_QUEUE_BUCKETS = Statement("history_queue_buckets", QueueBucket)


async def queue_buckets(conn: Conn, *, start: datetime, end: datetime, minutes: int,
                        queue: str | None, namespace: str | None, task: str | None,
                        tenant: str | None) -> list[QueueBucket]:
    """Per queue and bucket; of one tenant's queues, or of every tenant's (None)."""
    return await _QUEUE_BUCKETS.rows(conn, start=start, end=end, minutes=minutes, queue=queue,
                                     namespace=namespace, task=task, tenant=tenant)
