"""History for the analytics family (`/api/v1/analytics/*`) and the dashboard's charts.

Nothing here samples anything: the figures are what the broker keeps anyway.

- Per process and minute, `queen.stats_minutes`: every counter flush (core/upkeep/stats.py)
  adds its cluster-wide counter deltas (requests, messages, acks, dead letters, database
  errors, latency histogram buckets) and its gauges (pool, memory, CPU, parked pops, spool)
  to the process's row of the minute. Kept PROCESS_METRICS_RETENTION_DAYS.
- Per queue and sampling pass, `queen.stats_samples`: throughput, depth, lag, dead letters,
  evictions and retention, taken by the reaper every STATS_SAMPLE_INTERVAL_MS. Kept
  METRICS_RETENTION_DAYS.

A window is cut into buckets of a whole number of minutes, wider for wider windows (Queen's
rule: up to an hour 1 minute, 6 hours 5, a day 15, a week 60, beyond 360), and never
narrower than the sampling interval for the per-queue series. Latency percentiles are
estimated from the histogram buckets the way Prometheus' `histogram_quantile` does: linear
within the bucket the rank falls in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from core.counters import LATENCY_BOUNDS, TIMED, bucket_name
from core.settings import Settings
from core.storage import history as sql
from core.storage.database import Database
from core.storage.history import ProcessBucket, ProcessSpan, QueueBucket
from core.upkeep.stats import live_seconds

# The rows the edge reads (it imports them from here, never from core.storage)
__all__ = ["QUANTILES", "History", "Latency", "ProcessBucket", "ProcessSpan", "QueueBucket",
           "Window", "add_up", "bucket_minutes", "counters_of", "host_and_pid", "latency",
           "per_second", "timed"]

# (window up to this many minutes, bucket minutes); wider windows get the last width
_WIDTHS = ((60, 1), (360, 5), (1440, 15), (10080, 60))
_WIDEST = 360
QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True, slots=True)
class Window:
    start: datetime
    end: datetime

    @property
    def minutes(self) -> float:
        return (self.end - self.start).total_seconds() / 60


def bucket_minutes(window: Window, *, at_least: int = 1) -> int:
    """The bucket width for a window, in minutes (at least `at_least`)."""
    width = next((w for limit, w in _WIDTHS if window.minutes <= limit), _WIDEST)
    return max(width, at_least)


def counters_of(text: str) -> dict[str, int]:
    """A row's counters (JSON text of {name: delta})."""
    return {k: int(v) for k, v in json.loads(text).items()}


def add_up(many: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for counters in many:
        for name, value in counters.items():
            total[name] = total.get(name, 0) + value
    return total


@dataclass(frozen=True, slots=True)
class Latency:
    """One request kind's latency over some counters; None where nothing was timed."""

    count: int
    avg_ms: float | None
    quantiles_ms: dict[float, float | None]


def latency(counters: Mapping[str, int], kind: str) -> Latency:
    """Average and estimated quantiles of a timed request kind (core/counters.TIMED)."""
    count = counters.get(f"{kind}_seconds_count", 0)
    if count <= 0:
        return Latency(0, None, dict.fromkeys(QUANTILES))
    avg = counters.get(f"{kind}_seconds_sum_us", 0) / count / 1000
    per_bucket = [counters.get(bucket_name(kind, i), 0) for i in range(len(LATENCY_BOUNDS) + 1)]
    return Latency(count, round(avg, 3),
                   {q: _quantile_ms(q, per_bucket) for q in QUANTILES})


def _quantile_ms(q: float, per_bucket: list[int]) -> float | None:
    total = sum(per_bucket)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for index, n in enumerate(per_bucket):
        if n and seen + n >= rank:
            if index >= len(LATENCY_BOUNDS):  # +Inf: the largest finite bound, as Prometheus
                return LATENCY_BOUNDS[-1] * 1000
            low = LATENCY_BOUNDS[index - 1] if index else 0.0
            high = LATENCY_BOUNDS[index]
            return round((low + (high - low) * (rank - seen) / n) * 1000, 3)
        seen += n
    return None  # unreachable: the ranks add up to total


def timed(counters: Mapping[str, int]) -> dict[str, Latency]:
    return {kind: latency(counters, kind) for kind in TIMED}


def host_and_pid(process: str) -> tuple[str, int | None]:
    """`host:pid` split; the pid is None for a name of another form."""
    host, _, pid = process.rpartition(":")
    return (host, int(pid)) if host and pid.isdigit() else (process, None)


def per_second(count: int, minutes: int) -> float:
    return round(count / (minutes * 60), 3) if minutes > 0 else 0.0


class History:
    """Reads of the history for one database."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings

    @property
    def sample_minutes(self) -> int:
        """The sampling interval in whole minutes (at least 1): the narrowest bucket of the
        per-queue series."""
        return max(1, math.ceil(self._settings.stats_sample_interval_ms / 60_000))

    async def process_buckets(self, window: Window, *, hostname: str | None = None,
                              pid: int | None = None) -> tuple[int, list[ProcessBucket]]:
        """The bucket width and every process's buckets in the window."""
        width = bucket_minutes(window)
        async with self._db.session() as conn:
            rows = await sql.process_buckets(conn, start=window.start, end=window.end,
                                             minutes=width, hostname=hostname, pid=pid)
        return width, rows

    async def processes(self, window: Window) -> list[ProcessSpan]:
        async with self._db.session() as conn:
            return await sql.processes(conn, start=window.start, end=window.end,
                                       live_seconds=live_seconds(self._settings))

    async def queue_buckets(self, window: Window, *, tenant: str | None,
                            queue: str | None = None, namespace: str | None = None,
                            task: str | None = None) -> tuple[int, list[QueueBucket]]:
        """The bucket width and every matching queue's buckets in the window, of one
        tenant's queues or of every tenant's (None)."""
        width = bucket_minutes(window, at_least=self.sample_minutes)
        async with self._db.session() as conn:
            rows = await sql.queue_buckets(conn, start=window.start, end=window.end,
                                           minutes=width, queue=queue, namespace=namespace,
                                           task=task, tenant=tenant)
        return width, rows
