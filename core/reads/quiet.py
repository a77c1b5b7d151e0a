"""When a parked long poll may skip its backoff re-check: nothing changed since it looked.

Everything that makes messages deliverable announces it (pushes, acks that release spans,
lease expiries released by the reaper, DLQ replays, seeks, group deletes: core/listener.py),
and the wake-up hub counts those announcements per queue. A long poll whose last check found
nothing, while the hub kept listening and counted nothing for its queues since, would find
nothing again: its backoff re-check is skipped, so an empty long poll costs one statement,
not one per backoff interval. Three things make data claimable with no announcement:
- the clock, on a queue with windowBuffer, delayedProcessing or minPopWaitTime: such queues
  always re-check on the backoff (`TimedQueues` tells them apart);
- a span released by a `failed`/`retry` ack with a retryDelay: the process that applied the
  ack announces it when the delay has run (`RetryWakes`), and the reaper on the pass after
  (`core/maintenance.py`), should that process stop first;
- a lease that expires before a reaper releases it (a broker run without its reaper), and
  an option changed on another process: covered by a real re-check at least every
  `Backoff.quiet_max_ms` however quiet the queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence

from core import ack as acks
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
