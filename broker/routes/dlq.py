"""`GET /api/v1/dlq` (§5.1): dead letters, filtered and paged, newest first."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.state import state_of
from broker.wire import check_name, json_response, query_int
from core import dlq
from core.timefmt import iso, parse_iso

DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000


def optional_name(request: Request, key: str) -> str | None:
    """A name filter from the query string; absent or empty means "any"."""
    raw = request.query_params.get(key)
    return None if raw is None or raw == "" else check_name(raw, key)


def optional_time(request: Request, key: str) -> datetime | None:
    raw = request.query_params.get(key)
    return None if raw is None or raw == "" else parse_iso(raw, key)


def row_json(row: dlq.DlqRow) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "transactionId": row.transaction_id,
        "partitionId": str(row.partition_id),
        "queue": row.queue,
        "partition": row.partition,
        "consumerGroup": row.consumer_group,
        "errorMessage": row.error_message,
        "retryCount": row.retry_count,
        # Spliced in as stored: the payload is never decoded on its way out.
        "data": msgspec.Raw(row.payload),
        "producerSub": row.producer_sub,
        "createdAt": iso(row.created_at),
        "failedAt": iso(row.failed_at),
        "messageId": str(row.message_id),
        "traceId": str(row.trace_id) if row.trace_id else None,
        "offset": row.offset,
    }


async def list_dlq(request: Request) -> Response:
    state = state_of(request)
    where = dlq.DlqFilter(
        queue=optional_name(request, "queue"),
        consumer_group=optional_name(request, "consumerGroup"),
        partition=optional_name(request, "partition"),
        failed_from=optional_time(request, "from"),
        failed_to=optional_time(request, "to"))
    limit = query_int(request, "limit", DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
    offset = query_int(request, "offset", 0, high=2**62)
    rows, total = await dlq.list_rows(state.db, where, limit=limit, offset=offset)
    return json_response({"messages": [row_json(r) for r in rows],
                          "pagination": {"limit": limit, "offset": offset}, "total": total})


routes = [Route("/api/v1/dlq", list_dlq, methods=["GET"])]
