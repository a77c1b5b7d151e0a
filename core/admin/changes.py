"""`POST /api/v1/partitions/changed` (wire-protocol §6.6): which partitions of a queue were
written at or after an instant, in creation order, paged by a cursor, with a `safeTime`.

`safeTime` is read *before* the partitions, as the start of the oldest transaction still
open in the database (or now): a write stamps its partition's `last_write_at` inside its
own transaction, so a write not yet visible when the partitions are read belongs to a
transaction that was either open when `safeTime` was read (and started no later) or began
after it. Either way its time is at or after `safeTime`, so a caller that passes `safeTime`
as its next `since` misses nothing. On Citus the transactions of every node count: the log's
writes run on the workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from core.engine.fetch import UNKNOWN_TOPIC_OR_PARTITION
from core.storage import stats as sql
from core.storage.database import Database

MAX_PAGE = 1000  # partitions per entry per call (the official client asks for 1000)


@dataclass(frozen=True, slots=True)
class ChangedEntry:
    queue: str
    limit: int = MAX_PAGE
    since: datetime | None = None
    after: int | None = None  # the page cursor: the last partition id of the previous page


@dataclass(frozen=True, slots=True)
class ChangedPartition:
    name: str
    id: int
    last_offset: int
    log_start: int
    last_write_at: datetime | None


@dataclass(slots=True)
class ChangedResult:
    partitions: list[ChangedPartition] = field(default_factory=list)
    next: int | None = None  # more may follow after this partition id
    error: str | None = None


async def partitions_changed(db: Database, entries: Sequence[ChangedEntry], *,
                             tenant: str = "") -> tuple[datetime, list[ChangedResult]]:
    results: list[ChangedResult] = []
    async with db.session() as conn:
        safe = await sql.safe_time(conn, citus=db.topology.citus)  # first: see the docstring
        for entry in entries:
            limit = max(1, min(entry.limit, MAX_PAGE))
            rows = await sql.changed_partitions(conn, tenant=tenant, queue=entry.queue,
                                                since=entry.since,
                                                after=entry.after, limit=limit)
            if not rows:
                results.append(ChangedResult(error=UNKNOWN_TOPIC_OR_PARTITION))
                continue
            found = [ChangedPartition(r.name, r.id, r.last_offset, r.log_start,
                                      r.last_write_at)
                     for r in rows if r.id is not None and r.name is not None
                     and r.last_offset is not None and r.log_start is not None]
            results.append(ChangedResult(
                found, next=found[-1].id if len(found) == limit else None))
    return safe, results
