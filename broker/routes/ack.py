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


def to_group_acks(items: Sequence[AckItemIn | PlainAckItem], default_group: str,
                  tenant: str) -> list[GroupAck]:
    """`to_ack_item` of every item of a batch, with the group it commits for (an item may
    name its own), in one pass. A pop's acks share their status word: each distinct word
    is parsed once."""
    first_of: dict[str | bool | None, AckItem] = {}  # a status word -> its first item
    out: list[GroupAck] = []
    add = out.append
    for item in items:
        first = first_of.get(item.status)
        if first is None:
            ack = first_of[item.status] = to_ack_item(item)
        else:
            ack = AckItem(item.transactionId, item.partitionId, first.status,
                          item.leaseId or None, item.error)
        add(GroupAck(item.consumerGroup or default_group, ack, tenant))
    return out


def outcome_json(index: int, item: AckItem, outcome: AckOutcome) -> AckResult:
    result = AckResult(index, item.transaction_id, outcome.success, outcome.error,
                       outcome.lease_released, outcome.dlq)
    if outcome.noop:
        result.noop = True
    if outcome.conflated:
        result.conflated = outcome.conflated
    return result


async def _apply(request: Request, acks: list[GroupAck],
                 wire: Sequence[AckItemIn | PlainAckItem]) -> Response:
    broker = broker_of(request)
    if broker.tracing.enabled:
        header = tracing.from_header(request.headers.get("traceparent"))
        contexts = [tracing.parse(i.traceparent) for i in wire if i.traceparent]
        with broker.tracing.settle(acks[0].group if acks else QUEUE_MODE, header, contexts):
            result = await broker.ack_batch(acks)
    else:  # without a tracer the ack reads nothing for tracing
        result = await broker.ack_batch(acks)
    return json_response([outcome_json(i, ack.item, outcome)
                          for i, (ack, outcome) in enumerate(zip(acks, result.outcomes))])


async def ack_one(request: Request, body: AckItemIn, tenant: str) -> Response:
    return await _apply(request, [GroupAck(body.consumerGroup or QUEUE_MODE, to_ack_item(body),
                                           tenant)], [body])


def batch_body(raw: bytes, settings: Settings) -> AckBatchBody | PlainAckBatch:
    """The ack batch body (broker/wire/ack.py decodes it)."""
    return decode_ack_batch(raw)


async def ack_batch(request: Request, body: AckBatchBody | PlainAckBatch,
                    tenant: str) -> Response:
    # An item may name its own group.
    return await _apply(request, to_group_acks(body.acknowledgments,
                                               body.consumerGroup or QUEUE_MODE, tenant),
                        body.acknowledgments)
