"""Consumer-group administration (§6.1): listing, lag, deletion, seek and subscriptions.

A group is nothing but its cursors (one per partition it touched) plus, for named groups, a
stored subscription per queue. Deleting a group deletes those rows, so its next pop starts
again from its subscription rule; a seek rewrites cursors in place and releases leases.
Anything that can make messages deliverable again wakes the queue's parked pops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from core.db import Database, storage_errors
from core.errors import NotFound
from core.queries import QUERIES
from core.wakeup import notify_queues

# A lagging group counts as alive when it held a lease or consumed within this many seconds.
ACTIVE_WITHIN_SECONDS = 300


@dataclass(slots=True)
class GroupSummary:
    """One (group, queue) pair for the group list."""

    name: str
    queue: str
    members: set[str] = field(default_factory=set)
    partitions: int = 0
    partitions_with_lag: int = 0
    offset_lag: int = 0
    max_time_lag: float = 0.0
    last_active: datetime | None = None
    lease_active: bool = False
    subscription_mode: str | None = None
    subscription_timestamp: datetime | None = None
    subscription_created_at: datetime | None = None

    def state(self, now: datetime) -> str:
        if self.partitions_with_lag == 0:
            return "Stable"
        recent = (self.last_active is not None
                  and (now - self.last_active).total_seconds() <= ACTIVE_WITHIN_SECONDS)
        return "Lagging" if self.lease_active or recent else "Dead"


async def cursors(db: Database, *, group: str | None = None,
                  queue: str | None = None) -> list[asyncpg.Record]:
    """Every matching cursor with lag and lease figures (see admin_group_cursors)."""
    return await db.fetch("admin_group_cursors", group, queue)


async def summaries(db: Database) -> list[GroupSummary]:
    """One entry per (group, queue), from cursors and stored subscriptions."""
    found: dict[tuple[str, str], GroupSummary] = {}
    for c in await cursors(db):
        s = found.setdefault((c["consumer_group"], c["queue"]),
                             GroupSummary(c["consumer_group"], c["queue"]))
        s.partitions += 1
        if c["lease_active"]:
            s.lease_active = True
            s.members.add(c["worker_id"])
        if c["offset_lag"] > 0:
            s.partitions_with_lag += 1
            s.offset_lag += c["offset_lag"]
            s.max_time_lag = max(s.max_time_lag, c["time_lag_seconds"])
        seen = c["last_consumed_at"]
        if seen is not None and (s.last_active is None or seen > s.last_active):
            s.last_active = seen
    for sub in await db.fetch("admin_subscriptions", None):
        s = found.setdefault((sub["consumer_group"], sub["queue"]),
                             GroupSummary(sub["consumer_group"], sub["queue"]))
        s.subscription_mode = sub["mode"]
        s.subscription_timestamp = sub["subscription_from"]
        s.subscription_created_at = sub["created_at"]
    return sorted(found.values(), key=lambda s: (s.name, s.queue))


async def delete_group(db: Database, group: str, *, queue: str | None,
                       delete_metadata: bool) -> tuple[int, int]:
    """Delete a group's cursors (of one queue, or all) and optionally its subscriptions.

    Answers (cursors deleted, subscriptions deleted)."""
    async with db.connection() as conn:
        with storage_errors():
            async with conn.transaction():
                rows = await conn.fetch(QUERIES["admin_delete_group_cursors"], group, queue)
                subs = []
                if delete_metadata:
                    subs = await conn.fetch(QUERIES["admin_delete_group_subscriptions"],
                                            group, queue)
            # The group starts over from its subscription rule: its pops may now find work.
            await notify_queues(conn, [r["queue_id"] for r in rows])
    return len(rows), len(subs)


@dataclass(frozen=True, slots=True)
class SeekResult:
    queue_id: int
    cursors: list[tuple[str, int]]  # (partition name, committed) per cursor moved


async def seek(db: Database, group: str, queue: str, *, partition: str | None,
               timestamp: datetime | None) -> SeekResult:
    """Move the group's cursors on a queue (or one partition) to the end (timestamp None)
    or to just before the first message created at/after `timestamp`.

    Raises NotFound for an unknown queue, or an unknown partition when one is named."""
    async with db.connection() as conn:
        with storage_errors():
            queue_id = await conn.fetchval(QUERIES["admin_queue_by_name"], queue)
            if queue_id is None:
                raise NotFound(f"queue {queue!r} not found")
            rows = await conn.fetch(QUERIES["admin_seek"], queue_id, group, partition,
                                    timestamp)
            if partition is not None and not rows:
                raise NotFound(f"partition {partition!r} of queue {queue!r} not found")
            # A seek backwards (or a released lease) makes messages deliverable again.
            await notify_queues(conn, [queue_id])
    return SeekResult(queue_id, [(r["partition"], r["committed"]) for r in rows])


async def set_subscription_timestamp(db: Database, group: str, timestamp: datetime) -> int:
    """Change the stored first-contact instant of every subscription of the group; cursors
    that exist already do not move. Answers the subscriptions updated."""
    async with db.connection() as conn:
        with storage_errors():
            status = await conn.execute(QUERIES["admin_set_subscription_timestamp"], group,
                                        timestamp)
    return int(status.split()[-1])
