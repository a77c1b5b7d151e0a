"""Dead-letter routes: `GET /api/v1/dlq` (§5.1: filtered and paged, newest first), replay by
row id and bulk purge (§11)."""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.common import Pagination, given
from broker.wire.http import json_response
from broker.wire.messages import (
    DlqIdPath,
    DlqMessage,
    DlqMissing,
    DlqPage,
    DlqPurged,
    DlqPurgeQuery,
    DlqQuery,
    DlqReplayBody,
    Replayed,
    RetryAnswer,
)
from core.admin import dlq
from core.timefmt import iso


def retry_answer(done: dlq.ReplayedLetter) -> RetryAnswer:
    """The §5.2 answer of a replay (by address or by row id)."""
    return RetryAnswer(
        success=True, result="moved" if done.status == "queued" else "duplicate",
        queue=done.queue, partition=done.partition, consumerGroup=done.consumer_group,
        dlqId=str(done.dlq_id), originalTransactionId=done.original_transaction_id,
        replayedAs=Replayed(0, str(done.message_id), done.transaction_id, done.queue,
                            done.status, done.offset),
        dlqRowRemoved=True)


def row_json(row: dlq.DlqRow) -> DlqMessage:
    return DlqMessage(
        id=str(row.id), transactionId=row.transaction_id, partitionId=str(row.partition_id),
        queue=row.queue, partition=row.partition, consumerGroup=row.consumer_group,
        errorMessage=row.error_message, retryCount=row.retry_count,
        # Spliced in as stored: the payload is never decoded on its way out.
        data=msgspec.Raw(row.payload), producerSub=row.producer_sub,
        createdAt=iso(row.created_at), failedAt=iso(row.failed_at),
        messageId=str(row.message_id), traceId=str(row.trace_id) if row.trace_id else None,
        offset=row.offset, isEncrypted=True if row.encrypted else msgspec.UNSET)


async def list_dlq(request: Request, query: DlqQuery, tenant: str) -> Response:
    where = dlq.DlqFilter(
        queue=given(query.queue), consumer_group=given(query.consumerGroup),
        partition=given(query.partition),
        failed_from=query.start, failed_to=query.end)
    page = await broker_of(request).dlq.list_rows(where, limit=query.limit,
                                                  offset=query.offset, tenant=tenant)
    return json_response(DlqPage([row_json(r) for r in page.rows],
                                 Pagination(query.limit, query.offset), page.total,
                                 page.truncated, page.next_offset))


async def replay(request: Request, path: DlqIdPath, body: DlqReplayBody,
                 tenant: str) -> Response:
    """`POST /api/v1/dlq/{id}/replay` (§11): replay one dead letter by its row id, to its
    own queue and partition or to the ones the body names; answered as §5.2 (503 while
    pushes are in maintenance, like §5.2's route)."""
    broker_of(request).require_direct_writes()
    done = await broker_of(request).dlq.replay_id(
        int(path.id), queue=given(body.queue), partition=given(body.partition),
        tenant=tenant)
    if done is None:
        return json_response(DlqMissing(False, path.id, "Message not found"), 404)
    return json_response(retry_answer(done))


async def purge(request: Request, query: DlqPurgeQuery, tenant: str) -> Response:
    """`DELETE /api/v1/dlq?queue=&consumerGroup=` (§11): delete a queue's dead letters."""
    group = given(query.consumerGroup)
    deleted = await broker_of(request).dlq.purge(query.queue, group, tenant=tenant)
    return json_response(DlqPurged(True, deleted, query.queue, group))
