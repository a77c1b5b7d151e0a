"""Figures for the resource routes (§6.2) and metrics: derived from offsets and cursors.

Nothing is stored per message, so every count is arithmetic on offsets: retained messages
are `last_offset - log_start + 1`; the backlog of a partition is measured from its worst
(lowest) cursor, or from the start of the log when no group has touched it yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core import options as queue_options
from core.errors import NotFound
from core.storage import admin as sql
from core.storage import conflation as conflation_sql
from core.storage import depth as depth_sql
from core.storage.admin import Overview, PartitionListRow, PartitionPlace
from core.storage.database import Database

_EVERY_QUEUE = 1 << 40  # a LIMIT that never binds


@dataclass(frozen=True, slots=True)
class PartitionStats(PartitionPlace):
    """A partition's figures, derived from its offsets and cursors (`_stats`)."""

    oldest_at: datetime | None
    segments: int
    total: int
    pending: int
    processing: int
    completed: int
    failed: int
    dead_letter: int


def pending_after(last_offset: int, log_start: int, committed: int | None) -> int:
    """Messages past a cursor that are still retained (§6.2 depth rule)."""
    cursor = -1 if committed is None else committed
    return max(last_offset - max(cursor, log_start - 1), 0)


def _stats(r: sql.PartitionStatsRow) -> PartitionStats:
    backlog = pending_after(r.last_offset, r.log_start, r.min_committed)
    processing = min(max(int(r.processing or 0), 0), backlog)
    return PartitionStats(
        queue_id=r.queue_id, queue=r.queue, namespace=r.namespace, task=r.task, id=r.id,
        name=r.name, created_at=r.created_at, last_offset=r.last_offset,
        log_start=r.log_start, last_write_at=r.last_write_at, oldest_at=r.oldest_at,
        segments=int(r.segments), total=int(r.total), pending=backlog - processing,
        processing=processing, completed=max(int(r.total) - backlog, 0),
        failed=int(r.failing or 0), dead_letter=int(r.dead_letter))


@dataclass(slots=True)
class Totals:
    partitions: int = 0
    total: int = 0
    pending: int = 0
    processing: int = 0
    completed: int = 0
    failed: int = 0
    dead_letter: int = 0
    queues: set[int] = field(default_factory=set)

    def add(self, s: PartitionStats) -> None:
        self.partitions += 1
        self.total += s.total
        self.pending += s.pending
        self.processing += s.processing
        self.completed += s.completed
        self.failed += s.failed
        self.dead_letter += s.dead_letter
        self.queues.add(s.queue_id)


def totals_by(stats: Iterable[PartitionStats], key: str) -> dict[Any, Totals]:
    """Sum partition figures grouped by an attribute (queue_id, namespace, task)."""
    out: dict[Any, Totals] = {}
    for s in stats:
        out.setdefault(getattr(s, key), Totals()).add(s)
    return out


@dataclass(frozen=True, slots=True)
class ListedQueue:
    id: int
    name: str
    namespace: str
    task: str
    created_at: datetime
    options: dict[str, Any]  # every option, wire names


def _queue_row(r: sql.QueueInfo) -> ListedQueue:
    return ListedQueue(r.id, r.name, r.namespace, r.task, r.created_at,
                    queue_options.decode(r.options).as_dict())


@dataclass(frozen=True, slots=True)
class QueueFilter:
    """Which queues a list or status route covers (every field optional)."""

    queue: str | None = None
    namespace: str | None = None
    task: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None


@dataclass(frozen=True, slots=True)
class Depth:
    partitions: list[tuple[str, int]]  # (partition name, pending)
    conflation: bool = False  # the group's stored policy (extensions §20.2)

    @property
    def pending(self) -> int:
        return sum(p for _, p in self.partitions)


class Resources:
    """Figures for the resource, status and metrics routes."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def partition_stats(self, queue_ids: list[int] | None = None, *, tenant: str = ""
                              ) -> list[PartitionStats]:
        """Figures of the tenant's partitions (of the queues named by id, or of all)."""
        async with self._db.session() as conn:
            return [_stats(r) for r in await sql.partition_stats(conn, tenant=tenant,
                                                                 queue_ids=queue_ids)]

    async def queue_page(self, *, search: str | None, limit: int, offset: int,
                         where: QueueFilter | None = None, tenant: str = ""
                         ) -> tuple[list[tuple[ListedQueue, Totals]], int]:
        """A page of the tenant's queues with their totals, and the number of all matching
        queues."""
        f = where or QueueFilter()
        async with self._db.session() as conn:
            rows = await sql.queue_page(conn, tenant=tenant, search=search, limit=limit,
                                        offset=offset, name=f.queue, namespace=f.namespace,
                                        task=f.task, created_from=f.created_from,
                                        created_to=f.created_to)
        queues = [_queue_row(r) for r in rows]
        by_queue = totals_by(await self.partition_stats([q.id for q in queues],
                                                        tenant=tenant), "queue_id")
        total = int(rows[0].total) if rows else 0
        return [(q, by_queue.get(q.id, Totals())) for q in queues], total

    async def matching_stats(self, where: QueueFilter, *, tenant: str = ""
                             ) -> list[PartitionStats]:
        """Partition figures of every queue of the tenant the filter covers."""
        if where == QueueFilter():
            return await self.partition_stats(tenant=tenant)
        async with self._db.session() as conn:
            rows = await sql.queue_page(conn, tenant=tenant, search=None, limit=_EVERY_QUEUE,
                                        offset=0, name=where.queue, namespace=where.namespace,
                                        task=where.task, created_from=where.created_from,
                                        created_to=where.created_to)
        return (await self.partition_stats([r.id for r in rows], tenant=tenant)
                if rows else [])

    async def queue_detail(self, name: str, *, tenant: str = ""
                           ) -> tuple[ListedQueue, list[PartitionStats]]:
        async with self._db.session() as conn:
            row = await sql.queue_row(conn, tenant=tenant, name=name)
        if row is None:
            raise NotFound("Queue not found")
        queue = _queue_row(row)
        return queue, await self.partition_stats([queue.id], tenant=tenant)

    async def queue_depth(self, name: str, group: str | None, *, tenant: str = "") -> Depth:
        """Pending per partition (§21.2): past the named group's cursor, or, without a
        group, past the lowest named group's cursor (the queue-mode cursor when no named
        group has one); a partition nobody reads counts every retained message."""
        async with self._db.session() as conn:
            queue_id = await sql.queue_id(conn, tenant=tenant, name=name)
            if queue_id is None:
                raise NotFound("Queue not found")
            rows = await depth_sql.depth_cursors(conn, queue_id=queue_id, group=group)
            conflating = group is not None and await conflation_sql.of_queue(
                conn, queue_id=queue_id, group=group)
        return Depth([(r.partition, pending_after(r.last_offset, r.log_start, r.committed))
                      for r in rows], conflating)

    async def partitions(self, *, queue: str | None, limit: int, offset: int,
                         tenant: str = "") -> list[PartitionListRow]:
        async with self._db.session() as conn:
            return await sql.partitions_list(conn, tenant=tenant, queue=queue, limit=limit,
                                             offset=offset)

    async def overview(self, *, tenant: str = "") -> Overview:
        """The counts of the tenant's queues."""
        async with self._db.session() as conn:
            return await sql.overview(conn, tenant=tenant)
