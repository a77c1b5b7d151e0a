"""Marks for spans that `failed`/`retry` acks released with a retryDelay, once it has run.

The ack itself marks nothing: the span is not claimable yet. The process that applied the
ack announces it when the delay has run (to its own ready set and, by NOTIFY, to the
others'); should it stop first, the reaper announces due retries on its next pass
(core/upkeep/maintenance.py), and a reseed finds them in any case.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence

from core.engine import ack as acks
from core.errors import ServiceError
from core.storage import reads as sql
from core.storage.database import Database

log = logging.getLogger(__name__)


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


