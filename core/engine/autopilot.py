"""The pop autopilot's per-process state (wire-protocol-extensions §20.5).

A *lane* is what a pop addresses: (queue, or namespace/task, and group). Per lane this
process keeps the pops in flight (the width rule divides the lane's ready partitions among
them, in SQL: schema/functions/30_pop.sql) and a drain rate, an exponentially weighted average
of per-ack samples `n / (ack time - delivery time)` of an acked lease, which sizes the batch:
rate x 200 ms, clamped 100..1000 (100 before any sample).

Per process is what the protocol asks for: an ack served by another worker process of the
same deployment gives this one no sample (its lane keeps its last rate, or 100).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

BATCH_MIN = 100
BATCH_MAX = 1000
BATCH_HORIZON_S = 0.2  # the batch is what the lane drains in this long
EWMA_WEIGHT = 0.25  # weight of a new sample
WIDTH_MAX = 64
WAIT_MS = 100  # the pause suggested between empty non-waiting polls (optional echo)
# Leases remembered for their delivery time; the oldest are forgotten past this many (a
# lease nobody acks, or acked on another process, must not grow the map without bound).
_LEASES_KEPT = 10_000
# A sample's interval never counts as shorter than this (an ack in the same clock tick).
_MIN_INTERVAL_S = 0.001


@dataclass(frozen=True, slots=True)
class Lane:
    queue: str | None
    namespace: str | None
    task: str | None
    group: str


@dataclass(slots=True)
class _Delivery:
    lane: Lane
    at: float  # clock time of the delivery


def width(ready: int, in_flight: int) -> int:
    """Partitions one pop claims: the ready ones shared among the pops in flight (this one
    included), rounded up, 1..64; the SQL of the claim applies the same rule."""
    return min(max(math.ceil(ready / max(in_flight, 1)), 1), WIDTH_MAX)


def batch_for(rate: float | None) -> int:
    """Messages per pop for a lane draining `rate` messages per second (None: no sample)."""
    if rate is None:
        return BATCH_MIN
    return min(max(int(rate * BATCH_HORIZON_S), BATCH_MIN), BATCH_MAX)


class Autopilot:
    """Pops in flight and drain rates per lane; leases delivered by autopilot pops."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._in_flight: dict[Lane, int] = {}
        self._rate: dict[Lane, float] = {}
        self._leases: OrderedDict[str, _Delivery] = OrderedDict()

    @contextmanager
    def flight(self, lane: Lane) -> Iterator[int]:
        """Count a pop in flight on `lane` while the block runs; yields the count with it."""
        n = self._in_flight.get(lane, 0) + 1
        self._in_flight[lane] = n
        try:
            yield n
        finally:
            left = self._in_flight[lane] - 1
            if left:
                self._in_flight[lane] = left
            else:
                del self._in_flight[lane]

    def batch(self, lane: Lane) -> int:
        return batch_for(self._rate.get(lane))

    def rate(self, lane: Lane) -> float | None:
        return self._rate.get(lane)

    def delivered(self, lane: Lane, lease_id: str) -> None:
        """A pop of `lane` delivered under `lease_id` now."""
        self._leases[lease_id] = _Delivery(lane, self._clock())
        if len(self._leases) > _LEASES_KEPT:
            self._leases.popitem(last=False)

    def acked(self, acks: Iterable[tuple[str | None, bool]]) -> None:
        """Acks applied: (lease id or None, whether it released the lease), one per item.
        Each lease delivered here gives one sample per call: its items / time since its
        delivery; a released lease is forgotten."""
        counts: dict[str, int] = {}
        released: set[str] = set()
        for lease_id, lease_released in acks:
            if lease_id is None or lease_id not in self._leases:
                continue
            counts[lease_id] = counts.get(lease_id, 0) + 1
            if lease_released:
                released.add(lease_id)
        now = self._clock()
        for lease_id, n in counts.items():
            delivery = self._leases[lease_id]
            sample = n / max(now - delivery.at, _MIN_INTERVAL_S)
            old = self._rate.get(delivery.lane)
            self._rate[delivery.lane] = sample if old is None else (
                EWMA_WEIGHT * sample + (1 - EWMA_WEIGHT) * old)
            if lease_id in released:
                del self._leases[lease_id]
