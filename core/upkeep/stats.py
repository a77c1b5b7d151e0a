"""Observability in the core: counters flushed by each web worker, samples taken by the
reaper for the analytics series, and the figures the metrics routes read.

- Each web worker counts in memory (`core.counters.COUNTERS`) and a `CounterFlusher` adds the
  deltas to `queen.stats_counters` every METRICS_FLUSH_MS, in one statement on a connection
  of its own (so it never takes a pool connection from requests, and the pool's round-trip
  counts stay exact). The same statement refreshes the worker's heartbeat row
  (`queen.stats_processes`: pool, memory, parked long polls, spool figures). Summing in
  PostgreSQL aggregates every worker of every broker on the database; a worker killed
  outright loses at most one interval of counts.
- The reaper calls `sample` every STATS_SAMPLE_INTERVAL_MS (and `stats/refresh` calls it on
  demand): one statement derives per-queue throughput, depth and lag from what the log keeps
  anyway (partition offsets, cursors' consumed counts, dead letters) plus the flushed
  per-partition counters, and stores deltas in `queen.stats_samples`, trimmed after
  METRICS_RETENTION_DAYS.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from core.admin.resources import QueueFilter
from core.counters import COUNTERS, Counters
from core.engine.listener import ANY_QUEUE
from core.errors import ServiceError
from core.settings import Settings
from core.storage import admin as admin_sql
from core.storage import stats as sql
from core.storage import timers as timers_sql
from core.storage.admin import Overview
from core.storage.database import Database, PoolStats, connect_with_retry
from core.storage.statements import Conn
from core.storage.stats import QueueGauges, SeriesRow, Standby
from core.waiting import wait_event

log = logging.getLogger(__name__)

# Advisory lock key of sampling passes: "qstat" in ASCII.
SAMPLE_LOCK_KEY = 0x7173746174
SAMPLE_TRIM_BATCH = 10_000
# A heartbeat older than this many flush intervals means the process is gone.
LIVE_INTERVALS = 5
# Heartbeat rows older than this are deleted by the reaper.
FORGET_PROCESS_SECONDS = 600
# Analytics bucket units (wire-protocol §6.3 names hour|day|week|month; minute is ours).
UNITS = ("minute", "hour", "day", "week", "month")
_RATE_WINDOW = 60  # flushes remembered for `/metrics` rates
_FLUSH_SECONDS = 5.0  # the longest a flush may take before its deltas wait for the next
_LAST_FLUSH_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class OperatingFigures:
    """What the maintenance switch and the push spool report (core/spool, when present)."""

    maintenance: bool = False
    file_buffer_pending: int = 0
    file_buffer_failed: int = 0


def no_spool() -> OperatingFigures:
    """The provider until a spool is wired in: maintenance off, nothing buffered."""
    return OperatingFigures()


FiguresProvider = Callable[[], OperatingFigures]


def resident_memory_bytes() -> int:
    """This process's resident set (Linux /proc), 0 where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def open_files() -> tuple[int, int]:
    """How many files (connections among them) this process holds open, and how many it
    may (its soft limit); 0 where it cannot be read."""
    try:
        held = len(os.listdir("/proc/self/fd"))
    except OSError:
        held = 0
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return held, (0 if soft == resource.RLIM_INFINITY else soft)


def _cpu_us() -> tuple[int, int]:
    """CPU time this process has used so far, user and system, in microseconds."""
    times = os.times()
    return int(times.user * 1_000_000), int(times.system * 1_000_000)


@dataclass(slots=True)
class ProcessFigures:
    """One live web worker, as its last heartbeat described it."""

    process: str
    uptime_seconds: float
    role: str = "web"
    started_at: float = 0.0  # Unix time
    pool_size: int = 0
    pool_idle: int = 0
    pool_max: int = 0
    rss_bytes: int = 0
    open_files: int = 0
    max_open_files: int = 0  # 0: unknown
    parked: dict[int, int] = field(default_factory=dict)  # queue id (-1 = any) -> waiting
    maintenance: bool = False
    file_buffer_pending: int = 0
    file_buffer_failed: int = 0


def _process_figures(row: sql.ProcessRow) -> ProcessFigures:
    raw = json.loads(row.figures)
    return ProcessFigures(
        process=row.process,
        uptime_seconds=max((row.db_now - row.started_at).total_seconds(), 0.0),
        role=str(raw.get("role", "web")), started_at=row.started_at.timestamp(),
        pool_size=int(raw.get("poolSize", 0)), pool_idle=int(raw.get("poolIdle", 0)),
        pool_max=int(raw.get("poolMax", 0)), rss_bytes=int(raw.get("rssBytes", 0)),
        open_files=int(raw.get("openFiles", 0)), max_open_files=int(raw.get("maxOpenFiles", 0)),
        parked={int(k): int(v) for k, v in raw.get("parked", {}).items()},
        maintenance=bool(raw.get("maintenance", False)),
        file_buffer_pending=int(raw.get("fileBufferPending", 0)),
        file_buffer_failed=int(raw.get("fileBufferFailed", 0)))


class CounterFlusher:
    """Adds this process's counter deltas to the database every `interval` seconds, and
    refreshes its heartbeat row (also when there was nothing to count)."""

    def __init__(self, dsn: str, settings: Settings, *, pool_stats: Callable[[], PoolStats],
                 parked: Callable[[], Mapping[int, int]],
                 figures: Callable[[], OperatingFigures],
                 counters: Counters = COUNTERS, role: str = "web") -> None:
        self._dsn = dsn
        # web, kafka (processes that serve requests, and so take a share of each tenant's
        # rates: core/tenancy/limiter.py), reaper, timer firer
        self.role = role
        self._settings = settings
        self.interval = settings.metrics_flush_ms / 1000
        self._pool_stats = pool_stats
        self._parked = parked
        self._figures = figures
        self._counters = counters
        self.process = f"{socket.gethostname()}:{os.getpid()}"
        # Goes out with the first flush: `queen_process_starts_total` counts processes that
        # started, so a restart shows as an increase (docs/operating/alerts.md).
        counters.add("process_starts")
        self._cpu = _cpu_us()  # at the last successful flush
        self._conn: Conn | None = None
        self._lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        # (monotonic time, cluster requests, cluster messages) after recent flushes
        self.history: deque[tuple[float, int, int]] = deque(maxlen=_RATE_WINDOW)

    def close(self) -> None:
        """Make `flush_forever` return after a last flush."""
        self._stopping.set()

    async def flush_forever(self) -> None:
        while not self._stopping.is_set():
            await wait_event(self._stopping, self.interval)
            # The last flush (on the way out) must not hold up a shutdown for long.
            await self.flush(timeout=_LAST_FLUSH_SECONDS if self._stopping.is_set() else None)
        await self._disconnect()

    async def flush(self, timeout: float | None = None) -> bool:
        """Write the deltas counted so far; False (deltas kept for the next try) when the
        database cannot be reached or does not answer within `timeout` (default: a few
        intervals, at least `_FLUSH_SECONDS`)."""
        limit = timeout if timeout is not None else max(self.interval * 5, _FLUSH_SECONDS)
        async with self._lock:
            deltas = self._counters.take()
            keys = sorted(deltas)
            figures = self._figures()
            pool = self._pool_stats()
            cpu = _cpu_us()
            files, max_files = open_files()
            heartbeat = json.dumps({
                "poolSize": pool.size, "poolIdle": pool.idle, "poolMax": pool.max_size,
                "rssBytes": resident_memory_bytes(),
                "openFiles": files, "maxOpenFiles": max_files,
                "parked": {str(k): v for k, v in self._parked().items()},
                "maintenance": figures.maintenance,
                "fileBufferPending": figures.file_buffer_pending,
                "fileBufferFailed": figures.file_buffer_failed,
                "role": self.role,
                "cpuUserUs": cpu[0] - self._cpu[0], "cpuSystemUs": cpu[1] - self._cpu[1]})
            try:
                async with asyncio.timeout(limit):
                    if self._conn is None or self._conn.is_closed():
                        self._conn = await connect_with_retry(self._dsn, self._settings, 0,
                                                              role="stats")
                    done = await sql.flush(
                        self._conn, partition_ids=[k[0] for k in keys],
                        names=[k[1] for k in keys], deltas=[deltas[k] for k in keys],
                        process=self.process, figures=heartbeat, role=self.role)
            except (ServiceError, TimeoutError) as exc:
                self._counters.give_back(deltas)
                log.debug("counter flush failed, kept for the next one: %r", exc)
                await self._disconnect()
                return False
            except asyncio.CancelledError:  # e.g. a scrape's request cut off: keep the counts
                self._counters.give_back(deltas)
                await self._disconnect()
                raise
            self._cpu = cpu
            self.history.append((time.monotonic(), done.requests, done.messages))
            return True

    def rates(self) -> tuple[float | None, float | None]:
        """Cluster requests and messages per second over the last minute of flushes."""
        if len(self.history) < 2:
            return None, None
        (t0, r0, m0), (t1, r1, m1) = self.history[0], self.history[-1]
        span = t1 - t0
        if span <= 0:
            return None, None
        return round((r1 - r0) / span, 3), round((m1 - m0) / span, 3)

    async def _disconnect(self) -> None:  # async: callers may one day close gracefully
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()  # immediate: it may be stuck in a statement that timed out


ANY_QUEUE_LABEL = "*"  # parked pops not (yet) tied to one queue


@dataclass(slots=True)
class ClusterFigures:
    """What `/metrics` and `/metrics/prometheus` show: cluster counters (flushed by every
    process), live processes, per-queue gauges, parked pops per queue, and the overview
    counts; of every tenant (`tenant` None), or of one tenant's queues only."""

    counters: dict[str, int]
    processes: list[ProcessFigures]
    queues: list[QueueGauges]
    # (tenant, queue name) -> parked pops; ("", ANY_QUEUE_LABEL) in the view of every tenant
    parked: dict[tuple[str, str], int]
    overview: Overview
    timers_pending: int = 0  # timers scheduled and not yet fired (core/timers)
    standbys: list[Standby] = field(default_factory=list)  # streaming from the database
    tenant: str | None = None  # whose figures these are (None: the deployment's)


async def cluster_figures(db: Database, *, live_seconds: float,
                          tenant: str | None = None) -> ClusterFigures:
    """The figures of every tenant (None), or of one tenant's queues."""
    async with db.session() as conn:
        counters = {c.name: c.value for c in await sql.cluster_counters(conn)}
        processes = [_process_figures(r)
                     for r in await sql.live_processes(conn, seconds=live_seconds)]
        queues = [q for q in await sql.queue_gauges(conn)
                  if tenant is None or q.tenant == tenant]
        overview = await admin_sql.overview(conn, tenant=tenant)
        timers_pending = await timers_sql.pending(conn, tenant=tenant)
        # the database server's standbys are the deployment's, not a tenant's
        standbys = await sql.standbys(conn) if tenant is None else []
    names = {q.id: (q.tenant, q.name) for q in queues}
    parked = dict.fromkeys(names.values(), 0)
    if tenant is None:
        parked[("", ANY_QUEUE_LABEL)] = 0
    for p in processes:
        for queue_id, count in p.parked.items():
            key = (("", ANY_QUEUE_LABEL) if queue_id == ANY_QUEUE and tenant is None
                   else names.get(queue_id))
            if key is not None:
                parked[key] += count
    return ClusterFigures(counters, processes, queues, parked, overview, timers_pending,
                          standbys, tenant)


def live_seconds(settings: Settings) -> float:
    """How recent a heartbeat must be for its process to count as live."""
    return LIVE_INTERVALS * settings.metrics_flush_ms / 1000 + 2


async def sample(db: Database, settings: Settings) -> int:
    """One analytics sampling pass (serialised with any other); answers queue rows stored."""
    async with db.transaction() as conn:
        await sql.lock(conn, key=SAMPLE_LOCK_KEY)
        figures = await sql.sample_figures(conn, live_seconds=live_seconds(settings))
        return await sql.store_sample(conn, figures)


async def housekeeping(db: Database, *, retention_days: int,
                       minutes_retention_days: int) -> int:
    """Trim queue samples and per-process minute rows past their retention (bounded
    batches each) and forget dead processes' heartbeats; answers rows deleted."""
    deleted = 0
    for trim, days in ((sql.trim_samples, retention_days),
                       (sql.trim_minutes, minutes_retention_days)):
        for _ in range(20):
            async with db.session() as conn:
                count = await trim(conn, days=days, batch=SAMPLE_TRIM_BATCH)
            deleted += count
            if count < SAMPLE_TRIM_BATCH:
                break
    async with db.session() as conn:
        await sql.forget_processes(conn, seconds=FORGET_PROCESS_SECONDS)
    return deleted


@dataclass(frozen=True, slots=True)
class SeriesFilter:
    unit: str
    start: datetime
    end: datetime
    # Whose samples count: the queues the status and analytics routes select, by name
    # (`start` and `end` bound the samples; the queues' creation bounds are not asked for).
    queues: QueueFilter
    tenant: str = ""  # whose queues' samples (core/tenancy)


async def series(db: Database, where: SeriesFilter) -> list[SeriesRow]:
    queues = where.queues
    async with db.session() as conn:
        return await sql.series(conn, tenant=where.tenant, unit=where.unit, start=where.start,
                                end=where.end, queue=queues.queue,
                                namespace=queues.namespace, task=queues.task)
