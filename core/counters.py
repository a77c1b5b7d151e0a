"""This process's counters: plain in-memory integers, added to on the hot path and flushed
to PostgreSQL as deltas every METRICS_FLUSH_MS by `core.upkeep.stats.CounterFlusher`.

Counting costs a dict update per call, never a statement. Keys are (partition id, name):
partition 0 holds the cluster-wide counters (requests, messages, latency histograms), a
partition's id holds what the analytics need per queue and cannot read from the log itself
(messages delivered, acks that failed). Database errors are counted where driver errors are
translated (`core/storage/errors.py`), so one module-level instance serves the process.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable

Key = tuple[int, str]
CLUSTER = 0

# Latency histogram bounds in seconds (Prometheus `le`); the last bucket is +Inf.
LATENCY_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                  10.0, 30.0)
# The request kinds that have a latency histogram (queen_<kind>_duration_seconds).
TIMED = ("push", "pop", "ack")


def bucket_name(kind: str, index: int) -> str:
    """The counter holding one (non-cumulative) bucket of a latency histogram."""
    return f"{kind}_seconds_bucket_{index}"


class Counters:
    """Deltas since the last `take`."""

    def __init__(self) -> None:
        self._deltas: Counter[Key] = Counter()

    def add(self, name: str, n: int = 1, partition_id: int = CLUSTER) -> None:
        if n:
            self._deltas[(partition_id, name)] += n

    def add_per_partition(self, name: str, partition_ids: Iterable[int]) -> None:
        deltas = self._deltas
        for pid in partition_ids:
            deltas[(pid, name)] += 1

    def request(self, kind: str | None, seconds: float) -> None:
        """One HTTP request answered; `kind` (push, pop, ack, transaction, ...) when the
        route is one of those counted by name."""
        deltas = self._deltas
        deltas[(CLUSTER, "requests")] += 1
        if kind is None:
            return
        deltas[(CLUSTER, f"{kind}_requests")] += 1
        if kind in TIMED:
            index = bisect.bisect_left(LATENCY_BOUNDS, seconds)
            deltas[(CLUSTER, bucket_name(kind, index))] += 1
            deltas[(CLUSTER, f"{kind}_seconds_count")] += 1
            deltas[(CLUSTER, f"{kind}_seconds_sum_us")] += int(seconds * 1_000_000)

    def take(self) -> Counter[Key]:
        """The deltas so far; counting starts again from zero."""
        taken, self._deltas = self._deltas, Counter()
        return taken

    def give_back(self, deltas: Counter[Key]) -> None:
        """Deltas a failed flush could not write: they go out with the next one."""
        self._deltas.update(deltas)

    def peek(self) -> Counter[Key]:
        return Counter(self._deltas)


COUNTERS = Counters()
