"""The pop autopilot's per-process state (wire-protocol-extensions §20.5).

A *lane* is what a pop addresses: (queue, or namespace/task, and group). Per lane this
process keeps the pops live on it and a drain rate, an exponentially weighted average of
per-ack samples `n / (ack time - delivery time)` of an acked lease, which sizes the batch:
rate x 200 ms, clamped 100..1000 (100 before any sample).

`Widths` chooses how many partitions a pop of a queue lane claims (only the queue route's
pops, without `partitions`, not conflating), from process memory alone: what a `ReadyView`
says is ready for the lane, what the lane's last claim took and its last pop's fill, and
the lane's live pops. A lane it has no state for, or that has not claimed for over 1 s,
starts at round(ready / live pops), 1..64: the first pop of a new consumer claims one
partition, since this process knows nothing ready for it yet. After that the width moves
toward a target at most once per 500 ms or per 16 pops, smoothed (weight 0.25): the ready
count when larger; double when data has waited over 25 ms; half only when fewer than half
the width are ready, nothing has waited 6.25 ms and the last pop filled less than half.

Per process is what the protocol asks for: an ack served by another worker process of the
same deployment gives this one no sample (its lane keeps its last rate, or 100), and its
pops neither count as live here nor move this process's widths.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from core.holders import holding

BATCH_MIN = 100
BATCH_MAX = 1000
BATCH_HORIZON_S = 0.2  # the batch is what the lane drains in this long
EWMA_WEIGHT = 0.25  # weight of a new sample
WIDTH_MAX = 64
WAIT_MS = 100  # the pause suggested between empty non-waiting polls (optional echo)
# The width rule (§20.5).
WIDTH_IDLE_S = 1.0  # a lane that has not claimed for this long starts again
WIDTH_EVERY_S = 0.5  # at most one change of a lane's width per this long...
WIDTH_EVERY_POPS = 16  # ...or per this many of its pops
WIDTH_WEIGHT = 0.25  # weight of the target in a change
WIDEN_AGE_S = 0.025  # data ready this long: double
NARROW_AGE_S = 0.00625  # halving needs the oldest ready data younger than this...
NARROW_FILL = 0.5  # ...and the last pop delivering less than this share of its batch
_LANES_KEPT = 4096  # lanes whose width is remembered (the least recent are forgotten)
# Leases remembered for their delivery time; the oldest are forgotten past this many (a
# lease nobody acks, or acked on another process, must not grow the map without bound).
_LEASES_KEPT = 10_000
# A sample's interval never counts as shorter than this (an ack in the same clock tick).
_MIN_INTERVAL_S = 0.001


@dataclass(frozen=True, slots=True)
class PilotLane:
    queue: str | None
    namespace: str | None
    task: str | None
    group: str
    tenant: str = ""  # whose queues (core/tenancy)


@dataclass(slots=True)
class _Delivery:
    lane: PilotLane
    at: float  # clock time of the delivery


def clamp_width(value: float) -> int:
    """`value` rounded half up, 1..64."""
    return min(max(math.floor(value + 0.5), 1), WIDTH_MAX)


def start_width(ready: int, live: int) -> int:
    """Where a lane (re)starts: its known ready partitions shared among its live pops (this
    one included), rounded, 1..64."""
    return clamp_width(ready / max(live, 1))


def batch_for(rate: float | None) -> int:
    """Messages per pop for a lane draining `rate` messages per second (None: no sample)."""
    if rate is None:
        return BATCH_MIN
    return min(max(int(rate * BATCH_HORIZON_S), BATCH_MIN), BATCH_MAX)


@dataclass(frozen=True, slots=True)
class Pilot:
    """An autopilot pop (`autopilot=true`): which knobs it left to the broker."""

    batch: bool  # no `batch` sent
    width: bool  # no `partitions` sent


@dataclass(frozen=True, slots=True)
class Echo:
    """The answer's `autopilot` object: the width and batch the pop used."""

    partitions: int
    batch: int
    wait_ms: int = WAIT_MS


class ReadyView(Protocol):
    """What this process knows to be ready (deliverable, no live lease) for a lane
    (queue, group): a hint, never checked against the database."""

    def ready(self, queue: str, group: str) -> tuple[int, float | None]:
        """Ready partitions known for the lane, and the age in seconds of the one ready the
        longest (None when none is known). A lane the view knows nothing about: (0, None)."""
        ...

    def taken(self, queue: str, group: str, queue_ids: Sequence[int],
              partition_ids: Sequence[int]) -> float | None:
        """A pop of the lane addressed `queue_ids` (the queue's id) and claimed
        `partition_ids` (none: it found nothing): how long the one of them ready the longest
        had been ready (None: unknown)."""
        ...


class NothingReady:
    """A `ReadyView` that knows nothing: every lane starts, and stays, at width 1 unless
    its data waits or its pops fill (for tests and tools without wake-ups)."""

    def ready(self, queue: str, group: str) -> tuple[int, float | None]:
        return 0, None

    def taken(self, queue: str, group: str, queue_ids: Sequence[int],
              partition_ids: Sequence[int]) -> float | None:
        return None


@dataclass(slots=True)
class _Width:
    level: float  # the smoothed width; the width is it rounded, 1..64
    changed_at: float  # clock time of the last change (or of the start)
    pops: int = 0  # pops since the last change
    claimed_at: float | None = None  # clock time of the last claim that took something
    claim_age: float | None = None  # ready age of what that claim took
    fill: float | None = None  # the last pop's delivered / requested

    @property
    def width(self) -> int:
        return clamp_width(self.level)


class Widths:
    """The width of each queue lane's pops on this process (§20.5); see the module
    docstring. `choose` before a pop, `popped` after it. A lane's `queue` is the queue's name
    scoped by its tenant (core/tenancy/scoped.py)."""

    def __init__(self, view: ReadyView, clock: Callable[[], float] = time.monotonic) -> None:
        self._view = view
        self._clock = clock
        self._lanes: OrderedDict[tuple[str, str], _Width] = OrderedDict()

    def choose(self, queue: str, group: str, live: int) -> int:
        """The width of a pop of (queue, group) starting now, with `live` pops of the lane
        on this process (this one included)."""
        now = self._clock()
        ready, age = self._view.ready(queue, group)
        key = (queue, group)
        state = self._lanes.get(key)
        if state is None or state.claimed_at is None or now - state.claimed_at > WIDTH_IDLE_S:
            start = start_width(ready, live)
            self._lanes[key] = _Width(float(start), now, claimed_at=(
                state.claimed_at if state is not None else None))
            self._lanes.move_to_end(key)
            if len(self._lanes) > _LANES_KEPT:
                self._lanes.popitem(last=False)
            return start
        self._lanes.move_to_end(key)
        state.pops += 1
        if now - state.changed_at < WIDTH_EVERY_S and state.pops < WIDTH_EVERY_POPS:
            return state.width
        target = _target(state.width, ready, _oldest(age, state.claim_age), state.fill)
        if target is not None:
            state.level = min(max((1 - WIDTH_WEIGHT) * state.level + WIDTH_WEIGHT * target,
                                  1.0), float(WIDTH_MAX))
            state.changed_at, state.pops = now, 0
        return state.width

    def popped(self, queue: str, group: str, *, queue_ids: Sequence[int],
               partition_ids: Sequence[int], delivered: int, requested: int) -> None:
        """A pop of the lane addressed `queue_ids`, claimed `partition_ids` and delivered
        `delivered` of the `requested` messages."""
        claim_age = self._view.taken(queue, group, queue_ids, partition_ids)
        state = self._lanes.get((queue, group))
        if state is None:
            return
        state.fill = min(delivered / requested, 1.0) if requested > 0 else None
        if delivered:
            state.claimed_at = self._clock()
            state.claim_age = claim_age

    def width(self, queue: str, group: str) -> int | None:
        """The lane's current width (None: no state)."""
        state = self._lanes.get((queue, group))
        return None if state is None else state.width


def _oldest(*ages: float | None) -> float | None:
    known = [a for a in ages if a is not None]
    return max(known) if known else None


def _target(width: int, ready: int, age: float | None, fill: float | None) -> float | None:
    """Where a lane's width should move (None: stay): widen to the ready count, double when
    data has waited (now, or what the last claim took), halve when little is ready, nothing
    waits and the last pop filled less than half."""
    target: float | None = None
    if ready > width:
        target = ready
    if age is not None and age > WIDEN_AGE_S:
        target = max(target or 0, 2 * width)
    if (target is None and ready < width / 2 and (age is None or age < NARROW_AGE_S)
            and fill is not None and fill < NARROW_FILL):
        target = width / 2
    return target


class AutopilotState:
    """Pops in flight, drain rates and widths per lane; leases delivered by autopilot
    pops."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 view: ReadyView | None = None) -> None:
        self._clock = clock
        self.widths = Widths(NothingReady() if view is None else view, clock)
        self._in_flight: dict[PilotLane, int] = {}
        self._rate: dict[PilotLane, float] = {}
        self._leases: OrderedDict[str, _Delivery] = OrderedDict()

    def flight(self, lane: PilotLane) -> AbstractContextManager[int]:
        """Count a pop in flight on `lane` while the block runs; yields the count with it."""
        return holding(self._in_flight, lane)

    def batch(self, lane: PilotLane) -> int:
        return batch_for(self._rate.get(lane))

    def rate(self, lane: PilotLane) -> float | None:
        return self._rate.get(lane)

    def delivered(self, lane: PilotLane, lease_id: str) -> None:
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
