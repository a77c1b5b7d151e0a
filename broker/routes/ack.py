"""`POST /api/v1/ack` (§4.5) and `POST /api/v1/ack/batch` (§4.6)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.state import state_of
from broker.wire import check_name, decode_object, json_response, read_body
from core.ack import AckItem, AckOutcome, ack, parse_status
from core.errors import BadRequest
from core.pop import QUEUE_MODE


def ack_item(raw: Any, where: str) -> AckItem:
    if not isinstance(raw, dict):
        raise BadRequest(f"{where} must be an object")
    for key in ("transactionId", "partitionId"):
        if not isinstance(raw.get(key), str):
            raise BadRequest(f"{where}.{key} is required and must be a string")
    lease = raw.get("leaseId")
    if lease is not None and not isinstance(lease, str):
        raise BadRequest(f"{where}.leaseId must be a string")
    error = raw.get("error")
    return AckItem(transaction_id=raw["transactionId"], partition_id=raw["partitionId"],
                   status=parse_status(raw.get("status")), lease_id=lease or None,
                   error=None if error is None else str(error))


def group_of(value: Any, where: str) -> str:
    if value is None or value == "":
        return QUEUE_MODE
    return check_name(value, where)


def outcome_json(index: int, item: AckItem, outcome: AckOutcome) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "index": index,
        "transactionId": item.transaction_id,
        "success": outcome.success,
        "error": outcome.error,
        "leaseReleased": outcome.lease_released,
        "dlq": outcome.dlq,
    }
    if outcome.noop:
        entry["noop"] = True
    return entry


async def ack_one(request: Request) -> Response:
    state = state_of(request)
    body = decode_object(await read_body(request, state.settings.max_body_bytes))
    item = ack_item(body, "body")
    group = group_of(body.get("consumerGroup"), "consumerGroup")
    result = await ack(state.db, group, [item])
    if result.wake_queue_ids:
        state.hub.announce(result.wake_queue_ids)
    return json_response([outcome_json(0, item, result.outcomes[0])])


async def ack_batch(request: Request) -> Response:
    state = state_of(request)
    body = decode_object(await read_body(request, state.settings.max_body_bytes))
    raw_items = body.get("acknowledgments")
    if not isinstance(raw_items, list):
        raise BadRequest("acknowledgments array is required")
    default_group = group_of(body.get("consumerGroup"), "consumerGroup")
    items = [ack_item(raw, f"acknowledgments[{i}]") for i, raw in enumerate(raw_items)]
    # An item may name its own group; each group's acks are one transaction.
    groups: dict[str, list[int]] = {}
    for i, raw in enumerate(raw_items):
        own = raw.get("consumerGroup")
        group = default_group if own in (None, "") else group_of(own, f"acknowledgments[{i}]"
                                                                     ".consumerGroup")
        groups.setdefault(group, []).append(i)
    answers: list[dict[str, Any] | None] = [None] * len(items)
    for group, indexes in groups.items():
        result = await ack(state.db, group, [items[i] for i in indexes])
        if result.wake_queue_ids:
            state.hub.announce(result.wake_queue_ids)
        for i, outcome in zip(indexes, result.outcomes):
            answers[i] = outcome_json(i, items[i], outcome)
    return json_response(answers)


routes = [
    Route("/api/v1/ack", ack_one, methods=["POST"]),
    Route("/api/v1/ack/batch", ack_batch, methods=["POST"]),
]
