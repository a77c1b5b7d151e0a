"""Consumer-group administration (§6.1): listing, lag, deletion, seek and subscriptions.

A group is nothing but its cursors (one per partition it touched) plus, for named groups, a
stored subscription per queue. Deleting a group deletes those rows, so its next pop starts
again from its subscription rule; a seek rewrites cursors in place and releases leases.
Anything that can make messages deliverable again wakes the queue's parked pops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from core.engine.wakeup import Publish
from core.errors import NotFound
from core.storage import admin as sql
from core.storage.admin import GroupCursor
from core.storage.database import Database

# A lagging group counts as alive when it held a lease or consumed within this many seconds.
ACTIVE_WITHIN_SECONDS = 300


@dataclass(slots=True)
class GroupSummary:
    """One (group, queue) pair for the group list."""

    name: str
    queue: str
    members: set[str] = field(default_factory=set)
    partitions: int = 0  # partitions it reads (cursor or not)
    partitions_with_lag: int = 0
    offset_lag: int = 0
    max_time_lag: float = 0.0
    last_active: datetime | None = None
    lease_active: bool = False
    subscription_mode: str | None = None
    subscription_timestamp: datetime | None = None
    subscription_created_at: datetime | None = None
    conflation: bool = False  # the stored policy (extensions §20.2)

    def state(self, now: datetime) -> str:
        if self.partitions_with_lag == 0:
            return "Stable"
        recent = (self.last_active is not None
                  and (now - self.last_active).total_seconds() <= ACTIVE_WITHIN_SECONDS)
        return "Lagging" if self.lease_active or recent else "Dead"


@dataclass(frozen=True, slots=True)
class SeekResult:
    queue_id: int
    cursors: list[tuple[str, int]]  # (partition name, committed) per cursor moved


class ConsumerGroups:
    """Consumer-group administration; anything that can make messages deliverable again
    (a deleted group starts over, a seek moves back or releases a lease) wakes the queue's
    parked pops once committed."""

    def __init__(self, db: Database, publish: Publish) -> None:
        self._db = db
        self._publish = publish

    async def cursors(self, *, group: str | None = None, queue: str | None = None,
                      lagging_over: float | None = None, tenant: str = "") -> list[GroupCursor]:
        """Where each matching group stands on every partition of the tenant's queues it
        reads, with lag and lease figures (see admin_group_cursors); with `lagging_over`,
        only positions with messages behind whose oldest has waited longer than that many
        seconds."""
        async with self._db.session() as conn:
            return await sql.group_cursors(conn, tenant=tenant, group=group, queue=queue,
                                           lagging_over=lagging_over)

    async def summaries(self, *, tenant: str = "") -> list[GroupSummary]:
        """One entry per (group, queue of the tenant), from cursors and stored
        subscriptions."""
        found: dict[tuple[str, str], GroupSummary] = {}
        async with self._db.session() as conn:
            cursors = await sql.group_cursors(conn, tenant=tenant, group=None, queue=None)
            subscriptions = await sql.subscriptions(conn, tenant=tenant, group=None)
        for c in cursors:
            s = found.setdefault((c.consumer_group, c.queue),
                                 GroupSummary(c.consumer_group, c.queue))
            s.partitions += 1
            if c.lease_active and c.worker_id is not None:
                s.lease_active = True
                s.members.add(c.worker_id)
            if c.offset_lag > 0:
                s.partitions_with_lag += 1
                s.offset_lag += c.offset_lag
                s.max_time_lag = max(s.max_time_lag, c.time_lag_seconds)
            seen = c.last_consumed_at
            if seen is not None and (s.last_active is None or seen > s.last_active):
                s.last_active = seen
        for sub in subscriptions:
            s = found.setdefault((sub.consumer_group, sub.queue),
                                 GroupSummary(sub.consumer_group, sub.queue))
            s.subscription_mode = sub.mode
            s.subscription_timestamp = sub.subscription_from
            s.subscription_created_at = sub.created_at
            s.conflation = sub.conflation
        return sorted(found.values(), key=lambda s: (s.name, s.queue))

    async def delete(self, group: str, *, queue: str | None, delete_metadata: bool,
                     tenant: str = "") -> tuple[int, int]:
        """Delete a group's cursors (of one queue, or all of the tenant's) and optionally
        its subscriptions.

        Answers (cursors deleted, subscriptions deleted)."""
        async with self._db.transaction() as conn:
            queues = await sql.delete_group_cursors(conn, tenant=tenant, group=group,
                                                    queue=queue)
            subs = 0
            if delete_metadata:
                subs = await sql.delete_group_subscriptions(conn, tenant=tenant, group=group,
                                                            queue=queue)
        # The group starts over from its subscription rule: its pops may now find work.
        await self._publish((q, None) for q in queues)
        return len(queues), subs

    async def seek(self, group: str, queue: str, *, partition: str | None,
                   timestamp: datetime | None, tenant: str = "") -> SeekResult:
        """Move the group's cursors on a queue (or one partition) to the end (timestamp None)
        or to just before the first message created at/after `timestamp`.

        Raises NotFound for an unknown queue, or an unknown partition when one is named."""
        async with self._db.session() as conn:
            queue_id = await sql.queue_id(conn, tenant=tenant, name=queue)
            if queue_id is None:
                raise NotFound(f"queue {queue!r} not found")
            rows = await sql.seek(conn, queue_id=queue_id, group=group, partition=partition,
                                  timestamp=timestamp)
        if partition is not None and not rows:
            raise NotFound(f"partition {partition!r} of queue {queue!r} not found")
        # A seek backwards (or a released lease) makes messages deliverable again.
        await self._publish([(queue_id, None)])
        return SeekResult(queue_id, [(r.partition, r.committed) for r in rows])

    async def set_subscription_timestamp(self, group: str, timestamp: datetime, *,
                                         tenant: str = "") -> int:
        """Change the stored first-contact instant of every subscription of the group on
        the tenant's queues; cursors that exist already do not move. Answers the
        subscriptions updated."""
        async with self._db.session() as conn:
            return await sql.set_subscription_timestamp(conn, tenant=tenant, group=group,
                                                        timestamp=timestamp)
