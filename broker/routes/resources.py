"""Resource routes (§6.2): queues, queue detail and depth, partitions, namespaces, tasks,
overview."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.routes.dlq import optional_name
from broker.state import state_of
from broker.wire import check_name, json_response, query_int
from core import resources
from core.resources import PartitionStats, Totals
from core.timefmt import iso

DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000


def _iso(ts: datetime | None) -> str | None:
    return iso(ts) if ts is not None else None


def _stats_json(t: Totals | PartitionStats) -> dict[str, int]:
    return {"total": t.total, "pending": t.pending, "processing": t.processing,
            "completed": t.completed, "failed": t.failed, "deadLetter": t.dead_letter}


async def list_queues(request: Request) -> Response:
    state = state_of(request)
    limit = query_int(request, "limit", DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
    offset = query_int(request, "offset", 0, high=2**62)
    page, total = await resources.queue_page(state.db, search=optional_name(request, "search"),
                                             limit=limit, offset=offset)
    return json_response({
        "queues": [{"id": str(q.id), "name": q.name, "namespace": q.namespace,
                    "task": q.task, "createdAt": iso(q.created_at), "partitions": t.partitions,
                    "messages": {"total": t.total, "pending": t.pending,
                                 "processing": t.processing}}
                   for q, t in page],
        "total": total, "pagination": {"limit": limit, "offset": offset},
    })


async def queue_detail(request: Request) -> Response:
    state = state_of(request)
    queue, parts = await resources.queue_detail(state.db, check_name(
        request.path_params["queue"], "queue"))
    totals = Totals()
    for p in parts:
        totals.add(p)
    return json_response({
        "id": str(queue.id), "name": queue.name, "namespace": queue.namespace,
        "task": queue.task, "createdAt": iso(queue.created_at),
        "partitions": [{"id": str(p.id), "name": p.name, "createdAt": iso(p.created_at),
                        "stats": _stats_json(p), "lastOffset": p.last_offset,
                        "logStart": p.log_start, "oldestMessage": _iso(p.oldest_at),
                        "newestMessage": _iso(p.last_write_at) if p.total else None}
                       for p in parts],
        "totals": {**_stats_json(totals), "partitions": totals.partitions},
        "segments": {"segments": sum(p.segments for p in parts), "messages": totals.total},
        "options": queue.options,
    })


async def queue_depth(request: Request) -> Response:
    state = state_of(request)
    name = check_name(request.path_params["queue"], "queue")
    group = optional_name(request, "group")
    depth = await resources.queue_depth(state.db, name, group)
    pending_parts = sum(1 for _, n in depth.partitions if n > 0)
    return json_response({
        "queue": name, "group": group, "pending": depth.pending,
        "partitionsPending": pending_parts, "conflation": False,
        "effectivePending": depth.pending,
        "partitions": [{"partition": p, "pending": n} for p, n in depth.partitions],
    })


async def list_partitions(request: Request) -> Response:
    state = state_of(request)
    limit = query_int(request, "limit", DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
    offset = query_int(request, "offset", 0, high=2**62)
    rows = await resources.partitions(state.db, queue=optional_name(request, "queue"),
                                      limit=limit, offset=offset)
    return json_response({"partitions": [{
        "id": str(r["id"]), "name": r["name"], "queue": r["queue"],
        "lastOffset": r["last_offset"], "logStart": r["log_start"],
        "messages": max(r["last_offset"] - r["log_start"] + 1, 0),
        "createdAt": iso(r["created_at"]), "lastWriteAt": _iso(r["last_write_at"]),
    } for r in rows], "pagination": {"limit": limit, "offset": offset}})


def _grouped(by: dict[Any, Totals], key: str) -> list[dict[str, Any]]:
    return [{key: k, "queues": len(t.queues), "partitions": t.partitions,
             "messages": {"total": t.total, "pending": t.pending + t.processing}}
            for k, t in sorted(by.items())]


async def namespaces(request: Request) -> Response:
    stats = await resources.partition_stats(state_of(request).db)
    return json_response({"namespaces": _grouped(resources.totals_by(stats, "namespace"),
                                                 "namespace")})


async def tasks(request: Request) -> Response:
    stats = await resources.partition_stats(state_of(request).db)
    return json_response({"tasks": _grouped(resources.totals_by(stats, "task"), "task")})


async def overview(request: Request) -> Response:
    state = state_of(request)
    row = await resources.overview(state.db)
    stats = await resources.partition_stats(state.db)
    totals = Totals()
    for p in stats:
        totals.add(p)
    return json_response({
        "queues": row["queues"], "partitions": row["partitions"],
        "namespaces": len({p.namespace for p in stats}),
        "messages": {**_stats_json(totals), "appended": row["appended"]},
        "segments": row["segments"], "consumerGroups": row["groups"],
        "cursors": row["cursors"], "activeLeases": row["live_leases"],
        "deadLetters": row["dead_letters"], "timestamp": iso(row["db_now"]),
    })


routes = [
    Route("/api/v1/resources/queues", list_queues, methods=["GET"]),
    Route("/api/v1/resources/queues/{queue:path}/depth", queue_depth, methods=["GET"]),
    Route("/api/v1/resources/queues/{queue:path}", queue_detail, methods=["GET"]),
    Route("/api/v1/resources/partitions", list_partitions, methods=["GET"]),
    Route("/api/v1/resources/namespaces", namespaces, methods=["GET"]),
    Route("/api/v1/resources/tasks", tasks, methods=["GET"]),
    Route("/api/v1/resources/overview", overview, methods=["GET"]),
]
