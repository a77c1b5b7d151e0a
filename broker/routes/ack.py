"""`POST /api/v1/ack` (§4.5) and `POST /api/v1/ack/batch` (§4.6).

A batch is validated whole before any SQL (a bad item is a 400 and nothing moves), then
applied, all its groups, in one database transaction: each item answers what was applied
to it (a refused item, e.g. an invalid lease, answers `success: false` while the others
apply), and a storage failure rolls the whole batch back (503).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.ack import AckBatchBody, AckItemIn, AckResult
from broker.wire.http import json_response
from core.engine.ack import AckItem, AckOutcome, GroupAck, parse_status
from core.engine.pop import QUEUE_MODE


def to_ack_item(item: AckItemIn) -> AckItem:
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
                 tenant: str) -> Response:
    result = await broker_of(request).ack_batch(
        [GroupAck(group, item, tenant) for group, item in zip(groups, items)])
    return json_response([outcome_json(i, item, outcome)
                          for i, (item, outcome) in enumerate(zip(items, result.outcomes))])


async def ack_one(request: Request, body: AckItemIn, tenant: str) -> Response:
    return await _apply(request, [body.consumerGroup or QUEUE_MODE], [to_ack_item(body)],
                        tenant)


async def ack_batch(request: Request, body: AckBatchBody, tenant: str) -> Response:
    default_group = body.consumerGroup or QUEUE_MODE
    # An item may name its own group.
    groups = [item.consumerGroup or default_group for item in body.acknowledgments]
    return await _apply(request, groups, [to_ack_item(item) for item in body.acknowledgments],
                        tenant)
