"""`POST /api/v1/ack` (§4.5) and `POST /api/v1/ack/batch` (§4.6).

A batch is validated whole before any SQL (a bad item is a 400 and nothing moves), then
applied, all its groups, in one database transaction: each item answers what was applied
to it (a refused item, e.g. an invalid lease, answers `success: false` while the others
apply), and a storage failure rolls the whole batch back (503).
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.ack import (
    AckBatchBody,
    AckItemIn,
    AckResult,
    PlainAckBatch,
    PlainAckItem,
    decode_ack_batch,
)
from broker.wire.http import json_response
from core import tracing
from core.settings import Settings
from core.types import QUEUE_MODE, AckItem, AckOutcome, GroupAck, parse_status


def to_ack_item(item: AckItemIn | PlainAckItem) -> AckItem:
    return AckItem(transaction_id=item.transactionId, partition_id=item.partitionId,
                   status=parse_status(item.status), lease_id=item.leaseId or None,
                   error=item.error)


def outcome_json(index: int, item: AckItem, outcome: AckOutcome) -> AckResult:
    result = AckResult(index, item.transaction_id, outcome.success, outcome.error,
                       outcome.lease_released, outcome.dlq)
    if outcome.noop:
        result.noop = True
    if outcome.conflated:
        result.conflated = outcome.conflated
    return result


async def _apply(request: Request, groups: list[str], items: list[AckItem],
                 wire: Sequence[AckItemIn | PlainAckItem], tenant: str) -> Response:
    broker = broker_of(request)
    acks = [GroupAck(group, item, tenant) for group, item in zip(groups, items)]
    if broker.tracing.enabled:
        header = tracing.from_header(request.headers.get("traceparent"))
        contexts = [tracing.parse(i.traceparent) for i in wire if i.traceparent]
        with broker.tracing.settle(groups[0] if groups else QUEUE_MODE, header, contexts):
            result = await broker.ack_batch(acks)
    else:  # without a tracer the ack reads nothing for tracing
        result = await broker.ack_batch(acks)
    return json_response([outcome_json(i, item, outcome)
                          for i, (item, outcome) in enumerate(zip(items, result.outcomes))])


async def ack_one(request: Request, body: AckItemIn, tenant: str) -> Response:
    return await _apply(request, [body.consumerGroup or QUEUE_MODE], [to_ack_item(body)],
                        [body], tenant)


def batch_body(raw: bytes, settings: Settings) -> AckBatchBody | PlainAckBatch:
    """The ack batch body (broker/wire/ack.py decodes it)."""
    return decode_ack_batch(raw)


async def ack_batch(request: Request, body: AckBatchBody | PlainAckBatch,
                    tenant: str) -> Response:
    default_group = body.consumerGroup or QUEUE_MODE
    # An item may name its own group.
    groups = [item.consumerGroup or default_group for item in body.acknowledgments]
    return await _apply(request, groups, [to_ack_item(item) for item in body.acknowledgments],
                        body.acknowledgments, tenant)
