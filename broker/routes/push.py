"""`POST /api/v1/push` (wire-protocol §4.1), with a JSON or a binary body (§7.2)."""

from __future__ import annotations

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from broker.auth.gate import Identity
from broker.state import broker_of, state_of
from broker.wire.binary_push import BinaryPush, decode_push, stamp_producer
from broker.wire.http import json_response
from broker.wire.push import PushBody, PushCounts, PushItemIn, PushResult
from core.engine.push import PushItem, PushOutcome
from core.engine.writes import DEFAULT_PARTITION, NewMessage
from core.errors import PayloadTooLarge, ServiceError
from core.ids import NIL_UUID, uuid7
from core.settings import Settings


def to_push_item(item: PushItemIn, producer_sub: str | None, tenant: str = "") -> PushItem:
    """A decoded wire item as the core's push item of the caller's tenant, with its message
    id minted and the caller's identity as its producer (a `producerSub` in the body is never
    read, §9)."""
    message_id = uuid7()
    trace = item.traceId.value if item.traceId else None
    given = item.payload if item.payload is not UNSET else item.data
    payload = b"null" if given is UNSET else bytes(given)
    return PushItem(item.queue, item.partition or DEFAULT_PARTITION,
                    NewMessage(message_id, item.transactionId or str(message_id), payload,
                               trace, producer_sub), tenant)


def outcome_json(index: int, outcome: PushOutcome) -> PushResult:
    item = outcome.item
    txid = item.message.transaction_id
    if outcome.buffered:  # in the spool; the id it will be stored under (§11)
        message_id = str(item.message.message_id)
        return PushResult(index, txid, txid, item.queue, message_id, message_id, "buffered")
    if outcome.verdict is None:
        assert outcome.error is not None
        # message_id is always a string on the wire (§4.1); no message exists, so all zeros.
        return PushResult(index, txid, txid, item.queue, NIL_UUID, NIL_UUID, "failed",
                          error=outcome.error.message)
    verdict = outcome.verdict
    message_id = str(verdict.message_id)
    if verdict.status != "queued":
        return PushResult(index, txid, txid, item.queue, message_id, message_id,
                          verdict.status)
    trace = item.message.trace_id
    return PushResult(index, txid, txid, item.queue, message_id, message_id, "queued",
                      partition_id=str(outcome.partition_id),
                      trace_id=str(trace) if trace else None)


def binary_body(raw: bytes, settings: Settings) -> BinaryPush:
    """The binary push body (wire-protocol §7.2): "QPB1" | u8 flags | groups; plain groups
    (flags 4, optionally 1 = zstd) or framed groups of storage frames (flags 8), 2 =
    answer with counts. The answer is the JSON one."""
    return decode_push(raw, max_bytes=settings.max_body_bytes,
                       max_items=settings.max_push_items)


async def push(request: Request, body: PushBody | BinaryPush, identity: Identity,
               tenant: str) -> Response:
    if isinstance(body, BinaryPush):
        items = body.items  # decoded within the limits already
        stamp_producer(items, identity.sub)
        for item in items:
            item.tenant = tenant
    else:
        limit = state_of(request).settings.max_push_items
        if len(body.items) > limit:
            raise PayloadTooLarge(
                f"{len(body.items)} items is over the limit of {limit} per push")
        items = [to_push_item(item, identity.sub, tenant) for item in body.items]
    outcomes = await broker_of(request).push(items)
    errors = [o.error for o in outcomes if o.error is not None]
    # When nothing was written because the broker could not (database down, backlog full),
    # answer with that status so clients back off and retry the whole push; with partial
    # success the per-item `failed` entries say which items to resend.
    if errors and len(errors) == len(outcomes) and isinstance(errors[0], ServiceError):
        raise errors[0]
    if isinstance(body, BinaryPush) and body.counts:
        verdicts = [o.verdict.status for o in outcomes if o.verdict is not None]
        counts = PushCounts(len(outcomes), verdicts.count("queued"),
                            verdicts.count("duplicate"), errors[0].message if errors else None)
        if buffered := sum(o.buffered for o in outcomes):
            counts.buffered = buffered
        return json_response(counts, 201)
    return json_response([outcome_json(i, o) for i, o in enumerate(outcomes)], 201)
