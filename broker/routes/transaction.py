"""`POST /api/v1/transaction` (§4.7): an atomic bundle of pushes and acks."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.routes.ack import ack_item, group_of
from broker.routes.push import to_push_item
from broker.state import state_of
from broker.wire import PushItemIn, decode_object, json_response, read_body
from core.errors import BadRequest, PayloadTooLarge
from core.ids import uuid7
from core.transactions import TxAck, TxPush, run_transaction

_item_decoder = msgspec.json.Decoder(PushItemIn)


def _push_ops(op: dict[str, Any], where: str, start: int) -> list[TxPush]:
    raw_items = op.get("items")
    if raw_items is None:  # the flat form: the op itself is the item
        raw_items = [{k: v for k, v in op.items() if k != "type"}]
    if not isinstance(raw_items, list):
        raise BadRequest(f"{where}.items must be an array")
    pushes = []
    for k, raw in enumerate(raw_items):
        if not isinstance(raw, dict):
            raise BadRequest(f"{where}.items[{k}] must be an object")
        # Re-encode the item so it takes the exact validation path of /push.
        try:
            item = _item_decoder.decode(msgspec.json.encode(raw))
        except msgspec.ValidationError as exc:
            raise BadRequest(f"{where}.items[{k}]: {exc}") from None
        pushed = to_push_item(start + k, item)
        pushes.append(TxPush(pushed.queue, pushed.partition, pushed.message))
    return pushes


def parse_operations(body: dict[str, Any], max_items: int) -> tuple[list[TxPush | TxAck], list[str]]:
    if body.get("kv") or body.get("timers"):
        raise BadRequest("kv and timers riders are not supported by this broker")
    operations = body.get("operations")
    if not isinstance(operations, list):
        raise BadRequest("operations array is required")
    leases = body.get("requiredLeases") or []
    if not isinstance(leases, list) or not all(isinstance(x, str) for x in leases):
        raise BadRequest("requiredLeases must be an array of strings")
    ops: list[TxPush | TxAck] = []
    for i, op in enumerate(operations):
        where = f"operations[{i}]"
        if not isinstance(op, dict):
            raise BadRequest(f"{where} must be an object")
        kind = op.get("type")
        if kind == "push":
            ops.extend(_push_ops(op, where, len(ops)))
        elif kind == "ack":
            ops.append(TxAck(group_of(op.get("consumerGroup"), f"{where}.consumerGroup"),
                             ack_item(op, where)))
        else:
            raise BadRequest(f"{where}.type must be \"push\" or \"ack\", got {kind!r}")
        if len(ops) > max_items:
            raise PayloadTooLarge(f"more than {max_items} operations in one transaction")
    return ops, leases


async def transaction(request: Request) -> Response:
    state = state_of(request)
    bundle_id = str(uuid7())
    body = decode_object(await read_body(request, state.settings.max_body_bytes))
    try:
        ops, leases = parse_operations(body, state.settings.max_push_items)
    except BadRequest as exc:
        return json_response({"transactionId": bundle_id, "success": False,
                              "error": exc.message, "results": []}, 400)
    result = await run_transaction(state.db, state.pusher.directory, ops, leases)
    if not result.committed:
        return json_response({"transactionId": bundle_id, "success": False,
                              "error": result.error, "results": []})
    if result.wake_queue_ids:
        state.hub.announce(result.wake_queue_ids)
    results: list[dict[str, Any]] = []
    for i, op in enumerate(ops):
        if isinstance(op, TxPush):
            verdict = result.verdicts[i]
            entry: dict[str, Any] = {
                "index": i, "type": "push", "success": True,
                "transactionId": op.message.transaction_id,
                "messageId": str(verdict.message_id), "queueName": op.queue}
            if verdict.status == "duplicate":
                entry["duplicate"] = True
            results.append(entry)
        else:
            outcome = result.acks[i]
            results.append({"index": i, "type": "ack", "success": True,
                            "transactionId": op.item.transaction_id, "error": None,
                            "dlq": outcome.dlq})
    return json_response({"transactionId": bundle_id, "success": True, "results": results})


routes = [Route("/api/v1/transaction", transaction, methods=["POST"])]
