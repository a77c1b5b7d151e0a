"""The autopilot's `ReadyView` from wake-up hints, until the read path keeps a ready set.

What this process's wake-ups told it (core/engine/listener.py, `WakeupHub.pending`): per
queue, the partitions announced (by a local commit or another process's NOTIFY) within the
last second and not claimed here since, with when each was first announced. That is a
per-queue hint, not a per-group one: a claim by any group of this process removes the
partition, and a group that has not read it yet may still find it. It is only told about a
lane once that lane's own pops have run here (they name the queue's id): before that the
lane knows nothing, so a new consumer starts at width 1 (extensions §20.5).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

_LANES_KEPT = 4096  # lanes remembered (the least recent are forgotten)


class Hints(Protocol):
    def pending(self, queue_id: int) -> dict[int, float]: ...


class HintedReady:
    """`ReadyView` (core/engine/autopilot.py) over a wake-up hub's pending partitions."""

    def __init__(self, hints: Hints, clock: Callable[[], float] = time.monotonic) -> None:
        self._hints = hints
        self._clock = clock  # the hub's clock: time.monotonic
        # Per lane: the queue ids its pops addressed, and the pending partitions (with when
        # they were announced) its last `ready` saw, which `taken` dates a claim by: the
        # hub forgets a partition as soon as a pop of this process claims it.
        self._queue_ids: OrderedDict[tuple[str, str], tuple[int, ...]] = OrderedDict()
        self._seen: dict[tuple[str, str], dict[int, float]] = {}

    def ready(self, queue: str, group: str) -> tuple[int, float | None]:
        lane = (queue, group)
        queue_ids = self._queue_ids.get(lane)
        if queue_ids is None:
            return 0, None
        self._queue_ids.move_to_end(lane)
        pending: dict[int, float] = {}
        for queue_id in queue_ids:
            pending.update(self._hints.pending(queue_id))
        self._seen[lane] = pending
        if not pending:
            return 0, None
        return len(pending), max(self._clock() - min(pending.values()), 0.0)

    def taken(self, queue: str, group: str, queue_ids: Sequence[int],
              partition_ids: Sequence[int]) -> float | None:
        lane = (queue, group)
        if queue_ids:
            self._queue_ids[lane] = tuple(queue_ids)
            self._queue_ids.move_to_end(lane)
            if len(self._queue_ids) > _LANES_KEPT:
                forgotten, _ = self._queue_ids.popitem(last=False)
                self._seen.pop(forgotten, None)
        seen = self._seen.pop(lane, {})
        since = [seen[p] for p in partition_ids if p in seen]
        return max(self._clock() - min(since), 0.0) if since else None
