"""Message routes (§5.2–5.4): DLQ replay, one message by address, delete, and listing."""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from broker.routes.dlq import retry_answer
from broker.state import broker_of
from broker.wire.common import ErrorBody, Pagination, given
from broker.wire.http import json_response
from broker.wire.messages import (
    BusStatus,
    GroupState,
    ListedMessage,
    MessageDeleted,
    MessageDetail,
    MessageList,
    MessageMissing,
    MessagePath,
    MessagesQuery,
    Mode,
)
from broker.wire.types import PARTITION_KEY_DIGITS
from core.admin import messages
from core.ids import PartitionId
from core.timefmt import iso, iso_or_none


def _partition(path: MessagePath) -> PartitionId | None:
    """The partition id of the path; None when the text cannot name any of ours (ids are
    decimal integers), which answers 404 like an unknown one."""
    raw = path.partitionId
    if not (raw.isascii() and raw.isdigit()) or len(raw) > PARTITION_KEY_DIGITS:
        return None
    return PartitionId(int(raw))


def _not_found(path: MessagePath) -> Response:
    return json_response(MessageMissing(False, path.partitionId, path.transactionId,
                                        "Message not found",
                                        message="no dead-lettered message at this address"),
                         404)


async def retry(request: Request, path: MessagePath, tenant: str) -> Response:
    broker_of(request).require_direct_writes()  # 503 while pushes are in maintenance (§11)
    pid = _partition(path)
    done = None if pid is None else await broker_of(request).dlq.replay(
        pid, path.transactionId, tenant=tenant)
    if done is None:
        return _not_found(path)
    return json_response(retry_answer(done))


def _mode(groups: list[messages.GroupView]) -> Mode:
    queue_mode = any(g.name == messages.QUEUE_MODE for g in groups)
    bus = sum(1 for g in groups if g.name != messages.QUEUE_MODE)
    kind = "hybrid" if queue_mode and bus else "bus" if bus else "queue"
    return Mode(queue_mode, bus, kind)



async def get_message(request: Request, path: MessagePath, tenant: str) -> Response:
    pid = _partition(path)
    view = None if pid is None else await broker_of(request).messages.get(
        pid, path.transactionId, tenant=tenant)
    if view is None:
        return json_response(ErrorBody("Message not found"), 404)
    data = msgspec.Raw(view.payload)
    return json_response(MessageDetail(
        id=str(view.message_id), transactionId=view.transaction_id, data=data, payload=data,
        traceId=str(view.trace_id) if view.trace_id else None, producerSub=view.producer_sub,
        createdAt=iso(view.created_at), partitionId=str(view.partition_id),
        partition=view.partition, isEncrypted=view.encrypted, queue=view.queue,
        queuePath=f"{view.queue}/{view.partition}", namespace=view.namespace, task=view.task,
        offset=view.offset, status=view.status, errorMessage=view.error_message,
        retryCount=view.retry_count, leaseExpiresAt=iso_or_none(view.lease_expires_at),
        queueConfig=view.options, mode=_mode(view.groups),
        consumerGroups=[GroupState(g.name, g.status, g.committed, g.lease_active,
                                   iso_or_none(g.lease_expires_at), g.worker_id, g.retry_count)
                        for g in view.groups]))


async def delete_message(request: Request, path: MessagePath, tenant: str) -> Response:
    pid = _partition(path)
    deleted = 0 if pid is None else await broker_of(request).dlq.delete_address(
        pid, path.transactionId, tenant=tenant)
    if not deleted:
        return json_response(MessageMissing(False, path.partitionId, path.transactionId,
                                            "Message not found"), 404)
    return json_response(MessageDeleted(True, path.partitionId, path.transactionId,
                                        f"deleted {deleted} dead-letter row(s); "
                                        "stored log messages are immutable"))


async def list_messages(request: Request, query: MessagesQuery, tenant: str) -> Response:
    where = messages.ListFilter(
        queue=given(query.queue), partition=given(query.partition),
        namespace=given(query.ns) or given(query.namespace), task=given(query.task),
        status=given(query.status),
        created_from=query.start, created_to=query.end)
    broker = broker_of(request)
    # Each payload goes out twice (`data` and `payload`): the page's payloads are held to
    # half the budget, so that the answer keeps within it.
    page = await broker.messages.list(where, limit=query.limit, offset=query.offset,
                                      payload_bytes=broker.settings.list_max_bytes // 2,
                                      tenant=tenant)
    out = []
    for m in page.rows:
        v = m.view
        data = msgspec.Raw(v.payload)
        out.append(ListedMessage(
            id=str(v.message_id), transactionId=v.transaction_id,
            partitionId=str(v.partition_id), queuePath=f"{v.queue}/{v.partition}",
            queue=v.queue, partition=v.partition, namespace=v.namespace, task=v.task,
            offset=v.offset, status=v.status, queueStatus=v.status,
            busStatus=BusStatus(m.consumed_by, len(v.groups)),
            traceId=str(v.trace_id) if v.trace_id else None, producerSub=v.producer_sub,
            queuePriority=m.priority, createdAt=iso(v.created_at),
            leaseExpiresAt=iso_or_none(v.lease_expires_at), data=data, payload=data))
    groups = [g for m in page.rows for g in m.view.groups]
    return json_response(MessageList(out, _mode(groups), page.total,
                                     Pagination(query.limit, query.offset), page.truncated,
                                     page.next_offset))
