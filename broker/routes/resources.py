"""Resource routes (§6.2): queues, queue detail and depth, partitions, namespaces, tasks,
overview."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from broker.routes.status import queue_filter
from broker.state import broker_of
from broker.wire.common import Pagination, QueuePath, given
from broker.wire.http import json_response
from broker.wire.resources import (
    DepthQuery,
    MessageCounts,
    NamespaceList,
    NamespaceRow,
    PartitionDepth,
    PartitionDetail,
    PartitionList,
    PartitionListQuery,
    PartitionRow,
    PendingCounts,
    QueueDepth,
    QueueDetail,
    QueueList,
    QueueListQuery,
    QueueSummary,
    SegmentCounts,
    Stats,
    TaskList,
    TaskRow,
    TotalStats,
)
from core.admin.resources import PartitionStats, Totals, totals_by
from core.timefmt import iso, iso_or_none


def stats_json(t: Totals | PartitionStats) -> Stats:
    return Stats(t.total, t.pending, t.processing, t.completed, t.failed, t.dead_letter)


async def list_queues(request: Request, query: QueueListQuery, tenant: str) -> Response:
    page, total = await broker_of(request).resources.queue_page(
        search=given(query.search), limit=query.limit, offset=query.offset,
        where=queue_filter(query, created=True), tenant=tenant)
    return json_response(QueueList(
        [QueueSummary(str(q.id), q.name, q.namespace, q.task, iso(q.created_at), t.partitions,
                      MessageCounts(t.total, t.pending, t.processing)) for q, t in page],
        total, Pagination(query.limit, query.offset)))


async def queue_detail(request: Request, path: QueuePath, tenant: str) -> Response:
    queue, parts = await broker_of(request).resources.queue_detail(path.queue, tenant=tenant)
    totals = Totals()
    for p in parts:
        totals.add(p)
    return json_response(QueueDetail(
        str(queue.id), queue.name, queue.namespace, queue.task, iso(queue.created_at),
        [PartitionDetail(str(p.id), p.name, iso(p.created_at), stats_json(p), p.last_offset,
                         p.log_start, iso_or_none(p.oldest_at),
                         iso_or_none(p.last_write_at) if p.total else None) for p in parts],
        TotalStats(totals.total, totals.pending, totals.processing, totals.completed,
                   totals.failed, totals.dead_letter, totals.partitions),
        SegmentCounts(sum(p.segments for p in parts), totals.total), queue.options))


async def queue_depth(request: Request, path: QueuePath, query: DepthQuery,
                      tenant: str) -> Response:
    group = given(query.group)
    depth = await broker_of(request).resources.queue_depth(path.queue, group, tenant=tenant)
    pending_parts = sum(1 for _, n in depth.partitions if n > 0)
    # A conflating group's work left is one delivery per pending partition (§21.2).
    conflation = depth.conflation
    return json_response(QueueDepth(
        path.queue, group, depth.pending, pending_parts, conflation,
        pending_parts if conflation else depth.pending,
        [PartitionDepth(p, n) for p, n in depth.partitions]))


async def list_partitions(request: Request, query: PartitionListQuery,
                          tenant: str) -> Response:
    rows = await broker_of(request).resources.partitions(
        queue=given(query.queue), limit=query.limit, offset=query.offset, tenant=tenant)
    return json_response(PartitionList([PartitionRow(
        str(r.id), r.name, r.queue, r.last_offset, r.log_start,
        max(r.last_offset - r.log_start + 1, 0), iso(r.created_at),
        iso_or_none(r.last_write_at)) for r in rows], Pagination(query.limit, query.offset)))


def _counts(t: Totals) -> tuple[int, int, PendingCounts]:
    return len(t.queues), t.partitions, PendingCounts(t.total, t.pending + t.processing)


async def namespaces(request: Request, tenant: str) -> Response:
    stats = await broker_of(request).resources.partition_stats(tenant=tenant)
    by = totals_by(stats, "namespace")
    return json_response(NamespaceList([NamespaceRow(k, *_counts(t))
                                        for k, t in sorted(by.items())]))


async def tasks(request: Request, tenant: str) -> Response:
    stats = await broker_of(request).resources.partition_stats(tenant=tenant)
    by = totals_by(stats, "task")
    return json_response(TaskList([TaskRow(k, *_counts(t)) for k, t in sorted(by.items())]))


async def overview(request: Request, tenant: str) -> Response:
    figures = broker_of(request).resources
    row = await figures.overview(tenant=tenant)
    stats = await figures.partition_stats(tenant=tenant)
    totals = Totals()
    for p in stats:
        totals.add(p)
    answer: dict[str, Any] = {
        "queues": row.queues, "partitions": row.partitions,
        "namespaces": len({p.namespace for p in stats}),
        "messages": {**msgspec.structs.asdict(stats_json(totals)), "appended": row.appended},
        "segments": row.segments, "consumerGroups": row.groups,
        "cursors": row.cursors, "activeLeases": row.live_leases,
        "deadLetters": row.dead_letters, "timestamp": iso(row.db_now),
    }
    return json_response(answer)
