"""Message routes (§5.2–5.4): DLQ replay, one message by address, delete, and listing."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.routes.dlq import optional_name, optional_time
from broker.state import state_of
from broker.wire import MAX_TRANSACTION_ID_BYTES, check_name, json_response, query_int
from core import dlq, messages
from core.errors import BadRequest
from core.ids import PartitionId
from core.timefmt import iso

_MAX_PARTITION_ID = 2**63 - 1
LIST_DEFAULT_LIMIT = 200
LIST_MAX_LIMIT = 1000
STATUSES = ("dead_letter", "completed", "processing", "pending")


def _address(request: Request) -> tuple[PartitionId | None, str]:
    """(partition id, transactionId) from the path; the id is None when it cannot name any
    partition (ids are decimal integers), which answers 404 like an unknown one."""
    txid = check_name(request.path_params["transactionId"], "transactionId",
                      max_bytes=MAX_TRANSACTION_ID_BYTES)
    raw = request.path_params["partitionId"]
    if not raw.isascii() or not raw.isdigit() or int(raw) > _MAX_PARTITION_ID:
        return None, txid
    return PartitionId(int(raw)), txid


def _not_found(request: Request, txid: str) -> Response:
    return json_response({"success": False, "partitionId": request.path_params["partitionId"],
                          "transactionId": txid, "error": "Message not found",
                          "message": "no dead-lettered message at this address"}, 404)


async def retry(request: Request) -> Response:
    state = state_of(request)
    pid, txid = _address(request)
    done = None if pid is None else await dlq.replay(state.db, pid, txid)
    if done is None:
        return _not_found(request, txid)
    return json_response({
        "success": True,
        "result": "moved" if done.status == "queued" else "duplicate",
        "queue": done.queue,
        "partition": done.partition,
        "consumerGroup": done.consumer_group,
        "dlqId": str(done.dlq_id),
        "originalTransactionId": done.original_transaction_id,
        "replayedAs": {"index": 0, "message_id": str(done.message_id),
                       "transaction_id": done.transaction_id, "queueName": done.queue,
                       "status": done.status, "offset": done.offset},
        "dlqRowRemoved": True,
    })


def _mode(groups: list[messages.GroupState]) -> dict[str, Any]:
    queue_mode = any(g.name == messages.QUEUE_MODE for g in groups)
    bus = sum(1 for g in groups if g.name != messages.QUEUE_MODE)
    kind = "hybrid" if queue_mode and bus else "bus" if bus else "queue"
    return {"hasQueueMode": queue_mode, "busGroupsCount": bus, "type": kind}


async def get_message(request: Request) -> Response:
    state = state_of(request)
    pid, txid = _address(request)
    view = None if pid is None else await messages.get_message(state.db, pid, txid)
    if view is None:
        return json_response({"error": "Message not found"}, 404)
    data = msgspec.Raw(view.payload)
    return json_response({
        "id": str(view.message_id),
        "transactionId": view.transaction_id,
        "data": data,
        "payload": data,
        "traceId": str(view.trace_id) if view.trace_id else None,
        "producerSub": view.producer_sub,
        "createdAt": iso(view.created_at),
        "partitionId": str(view.partition_id),
        "partition": view.partition,
        "isEncrypted": False,
        "queue": view.queue,
        "queuePath": f"{view.queue}/{view.partition}",
        "namespace": view.namespace,
        "task": view.task,
        "offset": view.offset,
        "status": view.status,
        "errorMessage": view.error_message,
        "retryCount": view.retry_count,
        "leaseExpiresAt": iso(view.lease_expires_at) if view.lease_expires_at else None,
        "queueConfig": view.options,
        "mode": _mode(view.groups),
        "consumerGroups": [{
            "name": g.name, "status": g.status, "committedOffset": g.committed,
            "leaseActive": g.lease_active,
            "leaseExpiresAt": iso(g.lease_expires_at) if g.lease_expires_at else None,
            "workerId": g.worker_id, "retryCount": g.retry_count,
        } for g in view.groups],
    })


async def delete_message(request: Request) -> Response:
    state = state_of(request)
    pid, txid = _address(request)
    deleted = 0 if pid is None else await dlq.delete_address(state.db, pid, txid)
    if not deleted:
        return json_response({"success": False, "partitionId": request.path_params["partitionId"],
                              "transactionId": txid, "error": "Message not found"}, 404)
    return json_response({"success": True, "partitionId": request.path_params["partitionId"],
                          "transactionId": txid,
                          "message": f"deleted {deleted} dead-letter row(s); "
                                     "stored log messages are immutable"})


async def list_messages(request: Request) -> Response:
    state = state_of(request)
    status = request.query_params.get("status") or None
    if status is not None and status not in STATUSES:
        raise BadRequest(f"status must be one of {', '.join(STATUSES)}")
    where = messages.ListFilter(
        queue=optional_name(request, "queue"),
        partition=optional_name(request, "partition"),
        namespace=optional_name(request, "ns") or optional_name(request, "namespace"),
        task=optional_name(request, "task"),
        status=status,
        created_from=optional_time(request, "from"),
        created_to=optional_time(request, "to"))
    limit = query_int(request, "limit", LIST_DEFAULT_LIMIT, low=1, high=LIST_MAX_LIMIT)
    offset = query_int(request, "offset", 0, high=messages.LIST_MAX_PER_PARTITION)
    found, total = await messages.list_messages(state.db, where, limit=limit, offset=offset)
    out = []
    for m in found:
        v = m.view
        data = msgspec.Raw(v.payload)
        out.append({
            "id": str(v.message_id), "transactionId": v.transaction_id,
            "partitionId": str(v.partition_id), "queuePath": f"{v.queue}/{v.partition}",
            "queue": v.queue, "partition": v.partition, "namespace": v.namespace,
            "task": v.task, "offset": v.offset, "status": v.status, "queueStatus": v.status,
            "busStatus": {"consumedBy": m.consumed_by, "totalGroups": len(v.groups)},
            "traceId": str(v.trace_id) if v.trace_id else None,
            "producerSub": v.producer_sub, "queuePriority": m.priority,
            "createdAt": iso(v.created_at),
            "leaseExpiresAt": iso(v.lease_expires_at) if v.lease_expires_at else None,
            "data": data, "payload": data,
        })
    groups = [g for m in found for g in m.view.groups]
    return json_response({"messages": out, "mode": _mode(groups), "total": total,
                          "pagination": {"limit": limit, "offset": offset}})


routes = [
    Route("/api/v1/messages", list_messages, methods=["GET"]),
    Route("/api/v1/messages/{partitionId}/{transactionId:path}/retry", retry, methods=["POST"]),
    Route("/api/v1/messages/{partitionId}/{transactionId:path}", get_message, methods=["GET"]),
    Route("/api/v1/messages/{partitionId}/{transactionId:path}", delete_message,
          methods=["DELETE"]),
]
