"""`POST /api/v1/push` (wire-protocol §4.1)."""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.state import state_of
from broker.wire import (
    MAX_TRANSACTION_ID_BYTES,
    PUSH_DECODER,
    PushBody,
    PushItemIn,
    check_name,
    decode,
    json_response,
    read_body,
)
from core.errors import BadRequest, PayloadTooLarge, ServiceError
from core.ids import NIL_UUID, uuid7
from core.partitions import DEFAULT_PARTITION
from core.push import PushItem, PushOutcome
from core.writes import NewMessage


def to_push_item(index: int, raw: PushItemIn) -> PushItem:
    """Validate one wire item and mint its message id."""
    where = f"items[{index}]"
    if raw.queue is None:
        raise BadRequest(f"{where}.queue is required")
    queue = check_name(raw.queue, f"{where}.queue")
    partition = DEFAULT_PARTITION
    if raw.partition is not None:
        partition = check_name(raw.partition, f"{where}.partition") or DEFAULT_PARTITION
    message_id = uuid7()
    txid = str(message_id)
    if raw.transaction_id is not None:
        given = check_name(raw.transaction_id, f"{where}.transactionId",
                           max_bytes=MAX_TRANSACTION_ID_BYTES)
        txid = given or txid
    trace = None
    if raw.trace_id is not None:
        if not isinstance(raw.trace_id, str):
            raise BadRequest(f"{where}.traceId must be a string")
        if raw.trace_id:
            try:
                trace = uuid.UUID(raw.trace_id)
            except ValueError:
                raise BadRequest(f"{where}.traceId must be a UUID") from None
    payload = bytes(raw.payload) or bytes(raw.data) or b"null"
    return PushItem(queue, partition, NewMessage(message_id, txid, payload, trace))


def parse_push(body: bytes, max_items: int) -> list[PushItem]:
    try:
        parsed = decode(body, PushBody, PUSH_DECODER)
    except BadRequest as exc:
        # `items` of the wrong type fails inside the decoder; §4.1 names that error exactly.
        if exc.message.endswith("at `$.items`"):
            raise BadRequest("items array is required") from None
        raise
    if parsed.items is None:
        raise BadRequest("items array is required")
    if len(parsed.items) > max_items:
        raise PayloadTooLarge(
            f"{len(parsed.items)} items is over the limit of {max_items} per push")
    return [to_push_item(i, raw) for i, raw in enumerate(parsed.items)]


def outcome_json(index: int, outcome: PushOutcome) -> dict[str, Any]:
    item = outcome.item
    entry: dict[str, Any] = {
        "index": index,
        "transaction_id": item.message.transaction_id,
        "transactionId": item.message.transaction_id,
        "queueName": item.queue,
    }
    if outcome.verdict is None:
        assert outcome.error is not None
        # message_id is always a string on the wire (§4.1); no message exists, so all zeros.
        entry.update(message_id=NIL_UUID, messageId=NIL_UUID, status="failed",
                     error=outcome.error.message)
        return entry
    verdict = outcome.verdict
    message_id = str(verdict.message_id)
    entry.update(message_id=message_id, messageId=message_id, status=verdict.status)
    if verdict.status == "queued":
        entry["partition_id"] = str(outcome.partition_id)
        entry["trace_id"] = str(item.message.trace_id) if item.message.trace_id else None
    return entry


async def push(request: Request) -> Response:
    state = state_of(request)
    body = await read_body(request, state.settings.max_body_bytes)
    items = parse_push(body, state.settings.max_push_items)
    outcomes = await state.pusher.push(items)
    errors = [o.error for o in outcomes if o.error is not None]
    # When nothing was written because the broker could not (database down, backlog full),
    # answer with that status so clients back off and retry the whole push; with partial
    # success the per-item `failed` entries say which items to resend.
    if errors and len(errors) == len(outcomes) and isinstance(errors[0], ServiceError):
        raise errors[0]
    return json_response([outcome_json(i, o) for i, o in enumerate(outcomes)], 201)


routes = [Route("/api/v1/push", push, methods=["POST"])]
