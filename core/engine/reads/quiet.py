"""When a parked long poll may skip its backoff re-check: nothing changed since it looked.

Everything that makes messages deliverable announces it (pushes, acks that release spans,
lease expiries released by the reaper, DLQ replays, seeks, group deletes: core/engine/listener.py),
and the wake-up hub counts those announcements per queue. A long poll whose last check found
nothing, while the hub kept listening and counted nothing for its queues since, would find
nothing again: its backoff re-check is skipped, so an empty long poll costs one statement,
not one per backoff interval. The same holds across long polls: a new long poll of a
(queue, partition, group) whose last check on this process found nothing, with nothing
counted for the queue since, parks without a first check (`EmptyLines`): a consumer that
acks and polls again while its group has nothing new costs no statement. Three things make
data claimable with no announcement:
- the clock, on a queue with windowBuffer, delayedProcessing or minPopWaitTime: such queues
  always re-check on the backoff (`TimedQueues` tells them apart);
- a span released by a `failed`/`retry` ack with a retryDelay: the process that applied the
  ack announces it when the delay has run (`RetryWakes`), and the reaper on the pass after
  (`core/upkeep/maintenance.py`), should that process stop first;
- a lease that expires before a reaper releases it (a broker run without its reaper), and
  an option changed on another process: covered by a real re-check at least every
  `Backoff.quiet_max_ms` however quiet the queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from core.engine import ack as acks
from core.engine.pop import PopRequest
from core.errors import ServiceError
from core.storage import reads as sql
from core.storage.database import Database

log = logging.getLogger(__name__)

# How long what we know of a queue's options is trusted (an option set on another process
# reaches this one's parked pops within this time).
_TTL_SECONDS = 10.0
_MAX_QUEUES = 4096  # queues remembered; the whole memory is dropped past that


class TimedQueues:
    """Which queues the clock alone can make claimable, remembered per queue id."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._known: dict[int, tuple[bool, float]] = {}
        self.lookups = 0  # statements sent (for tests)

    async def any_timed(self, queue_ids: Sequence[int]) -> bool:
        now = time.monotonic()
        stale = [q for q in queue_ids
                 if (k := self._known.get(q)) is None or k[1] < now - _TTL_SECONDS]
        if stale:
            if len(self._known) + len(stale) > _MAX_QUEUES:
                self._known.clear()
                stale = list(queue_ids)
            self.lookups += 1
            async with self._db.session() as conn:
                rows = await sql.queue_timed(conn, queue_ids=stale)
            for q in stale:
                self._known[q] = (True, now)  # a queue gone meanwhile: just re-check it
            for row in rows:
                self._known[row.id] = (row.timed, now)
        return any(self._known[q][0] for q in queue_ids if q in self._known)

    def forget(self) -> None:
        """Options changed on this process: look again."""
        self._known.clear()


class RetryWakes:
    """Announces spans that `failed`/`retry` acks released with a retryDelay, once the delay
    has run (the ack itself wakes nobody: the span is not claimable yet)."""

    def __init__(self, db: Database,
                 announce: Callable[[Iterable[tuple[int, int | None]]], None]) -> None:
        self._db = db
        self._announce = announce

    async def after_acks(self, items: Sequence[acks.GroupAck],
                         outcomes: Sequence[acks.AckOutcome]) -> None:
        released = {(a.group, int(a.item.partition_id)) for a, o in zip(items, outcomes)
                    if a.item.status in ("failed", "retry") and o.success
                    and a.item.partition_id.isdigit()}
        if not released:
            return
        try:
            async with self._db.session() as conn:
                rows = await sql.pending_retries(conn, groups=[g for g, _ in released],
                                                 partition_ids=[p for _, p in released])
        except ServiceError as exc:  # the acks stand; the reaper or a re-check finds them
            log.info("could not schedule retry wake-ups (%s)", exc.message)
            return
        loop = asyncio.get_running_loop()
        for row in rows:
            # A little after the database's not-before time: the claim compares with it.
            loop.call_later(row.seconds + 0.05, self._announce,
                            [(row.queue_id, row.partition_id)])


@dataclass(frozen=True, slots=True)
class EmptyCheck:
    """A check that found nothing: the queues it covered, the hub's change mark over them
    taken just before it, and when it started (time.monotonic())."""

    queue_ids: frozenset[int]
    mark: tuple[int, ...]
    at: float


_MAX_LINES = 4096  # (queue, partition, group) lines remembered, least recent dropped


class EmptyLines:
    """The last empty check of each named queue's (queue, partition, group) on this process.

    Which messages a pop can claim depends on the queue, its partition filter and its group
    only (batch, partitions and lease length change how many, not whether any): another long
    poll of the same line may start from this check instead of repeating it, as long as the
    mark has not moved (`core.engine.longpoll` checks that, the clock rules and the age)."""

    def __init__(self) -> None:
        self._last: OrderedDict[tuple[str, str | None, str], EmptyCheck] = OrderedDict()

    @staticmethod
    def _key(request: PopRequest) -> tuple[str, str | None, str] | None:
        if request.queue is None:
            return None  # discovery pops: any queue of a namespace may serve them
        return (request.queue, request.partition, request.group)

    def found_nothing(self, request: PopRequest, check: EmptyCheck) -> None:
        key = self._key(request)
        if key is None:
            return
        self._last[key] = check
        self._last.move_to_end(key)
        if len(self._last) > _MAX_LINES:
            self._last.popitem(last=False)

    def found_something(self, request: PopRequest) -> None:
        key = self._key(request)
        if key is not None:
            self._last.pop(key, None)

    def last(self, request: PopRequest) -> EmptyCheck | None:
        key = self._key(request)
        return None if key is None else self._last.get(key)
