"""Dashboard status routes (§6.3): figures computed on demand, filtered as §6.3 lists, and
the analytics series sampled by the reaper (`core/upkeep/stats.py`).

Filters: `queue`, `namespace`, `task` select queues everywhere; on `/status` `from`/`to`
bound the throughput window (default: the last hour), on `/status/queues` they bound the
queues' creation time, like `/resources/queues`. `/status/analytics` answers buckets of
`interval` (minute, hour, day, week, month) between `from` and `to`.
"""

from __future__ import annotations

from datetime import timedelta

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.common import QueuePath, given
from broker.wire.http import json_response
from broker.wire.resources import (
    Analytics,
    AnalyticsBucket,
    AnalyticsQuery,
    QueueFilterQuery,
    StatusMessagesQuery,
    StatusQuery,
    StatusQueuesQuery,
)
from core.admin import messages
from core.admin.resources import QueueFilter, Totals
from core.timefmt import iso
from core.upkeep import stats

# Default window of each analytics interval when `from` is absent.
_DEFAULT_SPAN = {"minute": timedelta(hours=1), "hour": timedelta(days=1),
                 "day": timedelta(days=30), "week": timedelta(weeks=12),
                 "month": timedelta(days=365)}
_STATUS_SPAN = timedelta(hours=1)


def queue_filter(query: QueueFilterQuery, *, created: bool) -> QueueFilter:
    """The queues a query selects; `from`/`to` bound their creation time when `created`."""
    return QueueFilter(
        queue=given(query.queue), namespace=given(query.namespace), task=given(query.task),
        created_from=query.start if created else None,
        created_to=query.end if created else None)


def _totals_json(t: Totals) -> dict[str, int]:
    return {"total": t.total, "pending": t.pending, "processing": t.processing,
            "completed": t.completed, "failed": t.failed, "deadLetter": t.dead_letter}


async def status(request: Request, query: StatusQuery, tenant: str) -> Response:
    broker = broker_of(request)
    where = queue_filter(query, created=False)
    start, end = query.closed(_STATUS_SPAN)
    parts = await broker.resources.matching_stats(where, tenant=tenant)
    totals = Totals()
    for p in parts:
        totals.add(p)
    buckets = await broker.analytics(stats.SeriesFilter("hour", start, end, where, tenant))
    row = await broker.resources.overview(tenant=tenant)
    return json_response({
        "queues": len(totals.queues), "partitions": totals.partitions,
        "namespaces": len({p.namespace for p in parts}),
        "messages": _totals_json(totals),
        "throughput": {
            "from": iso(start), "to": iso(end),
            "pushed": sum(b.pushed for b in buckets),
            "delivered": sum(b.delivered for b in buckets),
            "acked": sum(b.acked for b in buckets),
            "failed": sum(b.failed for b in buckets),
            "deadLettered": sum(b.dead_lettered for b in buckets)},
        "filters": {"queue": where.queue, "namespace": where.namespace, "task": where.task},
        # the tenant's, whatever the filters (system-wide with a single tenant)
        "consumerGroups": row.groups, "activeLeases": row.live_leases,
        "deadLetters": row.dead_letters, "timestamp": iso(row.db_now),
    })


async def status_queues(request: Request, query: StatusQueuesQuery, tenant: str) -> Response:
    page, total = await broker_of(request).resources.queue_page(
        search=None, limit=query.limit, offset=query.offset,
        where=queue_filter(query, created=True), tenant=tenant)
    return json_response({
        "queues": [{"name": q.name, "namespace": q.namespace, "task": q.task,
                    "createdAt": iso(q.created_at), "partitions": t.partitions,
                    "messages": _totals_json(t)}
                   for q, t in page],
        "total": total, "pagination": {"limit": query.limit, "offset": query.offset},
    })


async def status_queue(request: Request, path: QueuePath, tenant: str) -> Response:
    queue, parts = await broker_of(request).resources.queue_detail(path.queue, tenant=tenant)
    totals = Totals()
    for p in parts:
        totals.add(p)
    return json_response({
        "queue": queue.name, "namespace": queue.namespace, "task": queue.task,
        "totals": _totals_json(totals),
        "partitions": [{"name": p.name, "id": str(p.id), "pending": p.pending,
                        "processing": p.processing, "total": p.total} for p in parts],
    })


async def status_queue_messages(request: Request, path: QueuePath,
                                query: StatusMessagesQuery, tenant: str) -> Response:
    # No payload in this answer: none is read, and the page is never cut.
    page = await broker_of(request).messages.list(
        messages.ListFilter(queue=path.queue), limit=query.limit, offset=query.offset,
        payload_bytes=None, tenant=tenant)
    found = page.rows
    return json_response({
        "queue": path.queue, "total": page.total,
        "pagination": {"limit": query.limit, "offset": query.offset},
        "messages": [{"id": str(m.view.message_id), "transactionId": m.view.transaction_id,
                      "partition": m.view.partition, "partitionId": str(m.view.partition_id),
                      "status": m.view.status, "createdAt": iso(m.view.created_at)}
                     for m in found],
    })


async def analytics(request: Request, query: AnalyticsQuery, tenant: str) -> Response:
    broker = broker_of(request)
    where = queue_filter(query, created=False)
    start, end = query.closed(_DEFAULT_SPAN[query.interval])
    rows = await broker.analytics(stats.SeriesFilter(query.interval, start, end, where,
                                                     tenant))
    return json_response(Analytics(
        query.interval, iso(start), iso(end), where.queue, where.namespace, where.task,
        broker.settings.stats_sample_interval_ms,
        [AnalyticsBucket(iso(r.at), r.pushed, r.delivered, r.acked, r.failed,
                         r.dead_lettered, r.depth, round(r.lag_seconds, 3)) for r in rows]))


async def refresh(request: Request) -> Response:
    """Take an analytics sample now (the reaper takes one every STATS_SAMPLE_INTERVAL_MS)."""
    broker = broker_of(request)
    assert broker.flusher is not None
    await broker.flusher.flush()  # this worker's counts go into the sample
    sampled = await broker.stats_refresh()
    return json_response({"success": True, "queuesSampled": sampled,
                          "message": "analytics sample taken"})
