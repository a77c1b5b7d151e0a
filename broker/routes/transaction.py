"""`POST /api/v1/transaction` (§4.7): an atomic bundle of pushes and acks, with a JSON or
a binary body (§7.3)."""

from __future__ import annotations

from typing import Any

from msgspec import UnsetType
from starlette.requests import Request
from starlette.responses import Response

from broker.auth.gate import Identity
from broker.routes.ack import to_ack_item
from broker.routes.push import to_push_item
from broker.state import broker_of, state_of
from broker.wire.binary_push import BinaryTransaction, decode_transaction, stamp_producer
from broker.wire.http import json_response
from broker.wire.push import PushItemIn
from broker.wire.transaction import (
    AckEntry,
    AckOp,
    PushEntry,
    PushOp,
    TransactionAnswer,
    TransactionBody,
)
from core.errors import BadRequest, PayloadTooLarge
from core.ids import uuid7
from core.settings import Settings
from core.types import QUEUE_MODE, GroupAck, PushItem, Rider, RiderOutcome


def failure(error: str, reason: str | None = None) -> TransactionAnswer:
    """The failure shape (§4.7), also used for the route's 4xx answers."""
    answer = TransactionAnswer(str(uuid7()), False, [], error=error)
    if reason is not None:
        answer.reason = reason
    return answer


def _push_items(op: PushOp, where: str) -> list[PushItemIn]:
    if op.items is not None:
        return op.items
    if op.queue is None:  # the flat form: the op itself is the item
        raise BadRequest(f"{where}.queue is required (or {where}.items)")
    return [PushItemIn(op.queue, op.partition, op.payload, op.data, op.transactionId,
                       op.traceId)]


def parse_operations(body: TransactionBody, max_items: int, producer_sub: str | None,
                     tenant: str) -> list[PushItem | GroupAck]:
    if body.operations is None and isinstance(body.kv, UnsetType) \
            and isinstance(body.timers, UnsetType):
        raise BadRequest(TransactionBody.MESSAGES["operations"])
    ops: list[PushItem | GroupAck] = []
    for i, op in enumerate(body.operations or ()):
        if isinstance(op, AckOp):
            ops.append(GroupAck(op.consumerGroup or QUEUE_MODE, to_ack_item(op), tenant))
        else:
            ops += (to_push_item(item, producer_sub, tenant=tenant)
                    for item in _push_items(op, f"operations[{i}]"))
        if len(ops) > max_items:
            raise PayloadTooLarge(f"more than {max_items} operations in one transaction")
    return ops


def binary_body(raw: bytes, settings: Settings) -> BinaryTransaction:
    """The binary transaction body (wire-protocol §7.3): "QTB1" | u8 flags (2 = answer with
    counts) | blob32 JSON head (the body without its pushes) | framed groups as in the
    binary push. The answer lists the head's operations first, then the pushed items."""
    return decode_transaction(raw, max_bytes=settings.max_body_bytes,
                              max_items=settings.max_push_items)


async def transaction(request: Request, body: TransactionBody | BinaryTransaction,
                      identity: Identity, tenant: str) -> Response:
    limit = state_of(request).settings.max_push_items
    head = body.head if isinstance(body, BinaryTransaction) else body
    ops = parse_operations(head, limit, identity.sub, tenant)
    service = broker_of(request)
    # In the order of their entries and of their locks (§17): KV rows, then timer rows.
    riders: list[Rider] = ([] if isinstance(head.kv, UnsetType)
                           else [service.kv.rider(head.kv, tenant=tenant)])
    timers = None
    if not isinstance(head.timers, UnsetType):
        timers = service.timers.rider(head.timers, identity.sub, tenant=tenant)
        riders.append(timers)
    if isinstance(body, BinaryTransaction):
        # The head's operations come first in the answer, then the pushes in wire order.
        stamp_producer(body.pushes, identity.sub)
        for item in body.pushes:
            item.tenant = tenant
        ops += body.pushes
        if len(ops) > limit:
            raise PayloadTooLarge(f"more than {limit} operations in one transaction")
    result = await service.transaction(
        ops, [lease for lease in head.requiredLeases if lease], riders, tenant=tenant)
    if result.committed and timers is not None:
        await service.timers.committed(timers)
    if result.refusal is not None:  # a rider's veto: 200 with its fields (§17)
        return json_response({
            "transactionId": str(uuid7()), "success": False, "results": [], "ok": False,
            **result.refusal.fields, "failedIndex": len(ops) + _offset(
                riders, result.refused_by) + result.refusal.op_index})
    if not result.committed:
        return json_response(failure(result.error or "transaction rejected", result.reason))
    if isinstance(body, BinaryTransaction) and body.counts:
        # Counts instead of the pushes' and acks' entries; the riders' entries stay, at
        # their flat positions.
        statuses = [v.status for v in result.verdicts.values()]
        return json_response({
            "transactionId": str(uuid7()), "success": True,
            "results": _rider_entries(result.riders, len(ops)),
            "pushed": statuses.count("queued"), "duplicate": statuses.count("duplicate"),
            "acked": len(result.acks)})
    results: list[PushEntry | AckEntry | dict[str, Any]] = []
    for i, op in enumerate(ops):
        if isinstance(op, PushItem):
            verdict = result.verdicts[i]
            entry = PushEntry(i, True, op.message.transaction_id,
                              str(verdict.message_id), op.queue)
            if verdict.status == "duplicate":
                entry.duplicate = True
            results.append(entry)
        else:
            results.append(AckEntry(i, True, op.item.transaction_id, None,
                                    result.acks[i].dlq))
    results += _rider_entries(result.riders, len(results))
    return json_response({"transactionId": str(uuid7()), "success": True,
                          "results": results})


def _rider_entries(outcomes: list[RiderOutcome], first: int) -> list[dict[str, Any]]:
    """The riders' entries, which follow the §4.7 ones in the flat array (§17): `index` is
    the flat position, `opIndex` the position in the rider."""
    entries: list[dict[str, Any]] = []
    for outcome in outcomes:
        for op_index, element in enumerate(outcome.entries):
            entries.append({**element, "index": first + len(entries), "opIndex": op_index})
    return entries


def _offset(riders: list[Rider], rider: Rider | None) -> int:
    """How many entries the riders before `rider` add to the flat results."""
    before = 0
    for one in riders:
        if one is rider:
            break
        before += len(one)
    return before
