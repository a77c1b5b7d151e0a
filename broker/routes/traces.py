"""Traces (§6.4): record one, and look them up by message, by name, and list the names."""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.common import Pagination
from broker.wire.http import json_response
from broker.wire.traces import (
    MessageTraces,
    NamedTraceOut,
    NamedTraces,
    TraceBody,
    TraceMessageQuery,
    TraceNameOut,
    TraceNamePath,
    TraceNames,
    TraceNamesQuery,
    TraceOut,
    TracePageQuery,
    TracePath,
    TraceRecorded,
)
from broker.wire.types import PARTITION_KEY_DIGITS
from core.admin.traces import NewTrace, Trace
from core.errors import BadRequest
from core.ids import PartitionId
from core.timefmt import iso
from core.types import QUEUE_MODE

DEFAULT_EVENT_TYPE = "info"


async def record(request: Request, body: TraceBody, tenant: str) -> Response:
    if body.transactionId == "":
        raise BadRequest("transactionId is required")
    names = body.traceNames or []
    if any(name == "" for name in names):
        raise BadRequest("traceNames must not contain empty names")
    recorded = await broker_of(request).traces.record(NewTrace(
        partition_id=PartitionId(body.partitionId.id), transaction_id=body.transactionId,
        group=body.consumerGroup or QUEUE_MODE,
        event_type=body.eventType or DEFAULT_EVENT_TYPE, data=bytes(body.data),
        names=names), tenant=tenant)
    return json_response(TraceRecorded(True, str(recorded.trace_id)), 201)


def _out(row: Trace) -> TraceOut:
    return TraceOut(str(row.id), row.event_type, msgspec.Raw(row.data), row.consumer_group,
                    row.worker_id, iso(row.created_at), row.trace_names)


async def of_message(request: Request, path: TracePath, query: TraceMessageQuery,
                     tenant: str) -> Response:
    raw = path.partitionId
    # Not one of our partition ids: a message nobody traced (a path, not a body field).
    if not (raw.isascii() and raw.isdigit()) or len(raw) > PARTITION_KEY_DIGITS:
        return json_response(MessageTraces([], False, query.offset))
    page = await broker_of(request).traces.of_message(
        PartitionId(int(raw)), path.transactionId, offset=query.offset, tenant=tenant)
    return json_response(MessageTraces([_out(r) for r in page.rows], page.truncated,
                                       page.next_offset))


async def by_name(request: Request, path: TraceNamePath, query: TracePageQuery,
                  tenant: str) -> Response:
    page = await broker_of(request).traces.by_name(path.name, limit=query.limit,
                                                   offset=query.offset, tenant=tenant)
    out = [NamedTraceOut(
        str(t.row.id), t.row.event_type, msgspec.Raw(t.row.data), t.row.consumer_group,
        t.row.worker_id, iso(t.row.created_at), t.row.trace_names,
        transaction_id=t.row.transaction_id, partition_id=str(t.row.partition_id),
        queue_name=t.row.queue, partition_name=t.row.partition,
        message_payload=None if t.message_payload is None else msgspec.Raw(t.message_payload))
        for t in page.rows]
    return json_response(NamedTraces(out, page.total, Pagination(query.limit, query.offset),
                                     page.truncated, page.next_offset))


async def names(request: Request, query: TraceNamesQuery, tenant: str) -> Response:
    page = await broker_of(request).traces.names(limit=query.limit, offset=query.offset,
                                                 search=query.search or None, tenant=tenant)
    return json_response(TraceNames(
        [TraceNameOut(n.name, n.trace_count, n.message_count, iso(n.last_seen))
         for n in page.names], page.total, Pagination(query.limit, query.offset)))
