"""`GET /api/v1/dlq` (§5.1): dead letters, filtered and paged, newest first."""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.common import Pagination, given
from broker.wire.http import json_response
from broker.wire.messages import DlqMessage, DlqPage, DlqQuery
from core import dlq
from core.timefmt import iso


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


async def list_dlq(request: Request, query: DlqQuery) -> Response:
    where = dlq.DlqFilter(
        queue=given(query.queue), consumer_group=given(query.consumerGroup),
        partition=given(query.partition),
        failed_from=query.from_.instant if query.from_ else None,
        failed_to=query.to.instant if query.to else None)
    rows, total = await broker_of(request).dlq.list_rows(where, limit=query.limit,
                                                         offset=query.offset)
    return json_response(DlqPage([row_json(r) for r in rows],
                                 Pagination(query.limit, query.offset), total))
