"""Dashboard status routes (§6.3), minimal: small JSON objects computed on demand.

No core flow reads these; the official client only passes them through. Statistics are
derived from offsets and cursors at request time, so `stats/refresh` has nothing to do.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.routes.dlq import optional_name
from broker.state import state_of
from broker.wire import check_name, json_response, query_int
from core import messages, resources
from core.timefmt import iso


async def status(request: Request) -> Response:
    state = state_of(request)
    row = await resources.overview(state.db)
    return json_response({
        "queues": row["queues"], "partitions": row["partitions"],
        "messages": {"appended": row["appended"], "retained": row["retained"]},
        "consumerGroups": row["groups"], "activeLeases": row["live_leases"],
        "deadLetters": row["dead_letters"], "timestamp": iso(row["db_now"]),
    })


async def status_queues(request: Request) -> Response:
    state = state_of(request)
    limit = query_int(request, "limit", 100, low=1, high=10_000)
    offset = query_int(request, "offset", 0, high=2**62)
    page, total = await resources.queue_page(state.db, search=None, limit=limit, offset=offset)
    return json_response({
        "queues": [{"name": q.name, "namespace": q.namespace, "task": q.task,
                    "partitions": t.partitions,
                    "messages": {"total": t.total, "pending": t.pending,
                                 "processing": t.processing, "completed": t.completed,
                                 "deadLetter": t.dead_letter}}
                   for q, t in page],
        "total": total, "pagination": {"limit": limit, "offset": offset},
    })


async def status_queue(request: Request) -> Response:
    state = state_of(request)
    queue, parts = await resources.queue_detail(
        state.db, check_name(request.path_params["queue"], "queue"))
    totals = resources.Totals()
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


async def status_queue_messages(request: Request) -> Response:
    state = state_of(request)
    name = check_name(request.path_params["queue"], "queue")
    limit = query_int(request, "limit", 50, low=1, high=1000)
    offset = query_int(request, "offset", 0, high=messages.LIST_MAX_PER_PARTITION)
    found, total = await messages.list_messages(state.db, messages.ListFilter(queue=name),
                                                limit=limit, offset=offset)
    return json_response({
        "queue": name, "total": total, "pagination": {"limit": limit, "offset": offset},
        "messages": [{"id": str(m.view.message_id), "transactionId": m.view.transaction_id,
                      "partition": m.view.partition, "partitionId": str(m.view.partition_id),
                      "status": m.view.status, "createdAt": iso(m.view.created_at)}
                     for m in found],
    })


async def analytics(request: Request) -> Response:
    optional_name(request, "queue")  # validated for a 400 on bad input, otherwise unused
    return json_response({"interval": request.query_params.get("interval") or "hour",
                          "series": []})


async def refresh(request: Request) -> Response:
    return json_response({"success": True, "message": "statistics are computed on demand"})


routes = [
    Route("/api/v1/status", status, methods=["GET"]),
    Route("/api/v1/status/queues", status_queues, methods=["GET"]),
    Route("/api/v1/status/analytics", analytics, methods=["GET"]),
    Route("/api/v1/status/queues/{queue:path}/messages", status_queue_messages, methods=["GET"]),
    Route("/api/v1/status/queues/{queue:path}", status_queue, methods=["GET"]),
    Route("/api/v1/stats/refresh", refresh, methods=["POST"]),
]
