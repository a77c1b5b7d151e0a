"""Dashboard status routes (§6.3), minimal: small JSON objects computed on demand.

No core flow reads these; the official client only passes them through. Statistics are
derived from offsets and cursors at request time, so `stats/refresh` has nothing to do.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.common import QueuePath
from broker.wire.http import json_response
from broker.wire.resources import AnalyticsQuery, PageQuery, StatusMessagesQuery
from core import messages
from core.resources import Totals
from core.timefmt import iso


async def status(request: Request) -> Response:
    row = await broker_of(request).resources.overview()
    return json_response({
        "queues": row.queues, "partitions": row.partitions,
        "messages": {"appended": row.appended, "retained": row.retained},
        "consumerGroups": row.groups, "activeLeases": row.live_leases,
        "deadLetters": row.dead_letters, "timestamp": iso(row.db_now),
    })


async def status_queues(request: Request, query: PageQuery) -> Response:
    page, total = await broker_of(request).resources.queue_page(
        search=None, limit=query.limit, offset=query.offset)
    return json_response({
        "queues": [{"name": q.name, "namespace": q.namespace, "task": q.task,
                    "partitions": t.partitions,
                    "messages": {"total": t.total, "pending": t.pending,
                                 "processing": t.processing, "completed": t.completed,
                                 "deadLetter": t.dead_letter}}
                   for q, t in page],
        "total": total, "pagination": {"limit": query.limit, "offset": query.offset},
    })


async def status_queue(request: Request, path: QueuePath) -> Response:
    queue, parts = await broker_of(request).resources.queue_detail(path.queue)
    totals = Totals()
    for p in parts:
        totals.add(p)
    return json_response({
        "queue": queue.name, "namespace": queue.namespace, "task": queue.task,
        "totals": {"total": totals.total, "pending": totals.pending,
                   "processing": totals.processing, "completed": totals.completed,
                   "deadLetter": totals.dead_letter},
        "partitions": [{"name": p.name, "id": str(p.id), "pending": p.pending,
                        "processing": p.processing, "total": p.total} for p in parts],
    })


async def status_queue_messages(request: Request, path: QueuePath,
                                query: StatusMessagesQuery) -> Response:
    found, total = await broker_of(request).messages.list(
        messages.ListFilter(queue=path.queue), limit=query.limit, offset=query.offset)
    return json_response({
        "queue": path.queue, "total": total,
        "pagination": {"limit": query.limit, "offset": query.offset},
        "messages": [{"id": str(m.view.message_id), "transactionId": m.view.transaction_id,
                      "partition": m.view.partition, "partitionId": str(m.view.partition_id),
                      "status": m.view.status, "createdAt": iso(m.view.created_at)}
                     for m in found],
    })


async def analytics(request: Request, query: AnalyticsQuery) -> Response:
    return json_response({"interval": query.interval or "hour", "series": []})


async def refresh(request: Request) -> Response:
    return json_response({"success": True, "message": "statistics are computed on demand"})
