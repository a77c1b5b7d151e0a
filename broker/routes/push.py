"""`POST /api/v1/push` (wire-protocol §4.1), with a JSON or a binary body (§7.2)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from broker.auth.gate import Identity
from broker.state import broker_of, state_of
from broker.wire.binary_push import BinaryPush, decode_push, stamp_producer
from broker.wire.http import json_response
from broker.wire.push import (
    PlainPushItem,
    PushCounts,
    PushItemIn,
    PushResult,
    decode_json_push,
)
from core import tracing
from core.errors import PayloadTooLarge, ServiceError
from core.ids import NIL_UUID, uuid7, uuid7s
from core.settings import Settings
from core.types import DEFAULT_PARTITION, NewMessage, PushItem, PushOutcome

_NIL = uuid.UUID(NIL_UUID)


def to_push_item(item: PushItemIn | PlainPushItem, producer_sub: str | None,
                 message_id: uuid.UUID | None = None, tenant: str = "") -> PushItem:
    """A decoded wire item as the core's push item of the caller's tenant, with its message
    id (minted unless given) and the caller's identity as its producer (a `producerSub` in
    the body is never read, §9)."""
    if message_id is None:
        message_id = uuid7()
    given = item.payload if item.payload is not UNSET else item.data
    payload = b"null" if given is UNSET else bytes(given)
    trace = item.traceId
    return PushItem(item.queue, item.partition or DEFAULT_PARTITION,
                    NewMessage(message_id, item.transactionId or str(message_id), payload,
                               uuid.UUID(trace) if trace else None, producer_sub), tenant)


def to_push_items(items: Sequence[PushItemIn | PlainPushItem],
                  producer_sub: str | None, tenant: str = "") -> list[PushItem]:
    """`to_push_item` of every item (of the caller's tenant), their ids minted together."""
    return [to_push_item(item, producer_sub, message_id, tenant)
            for item, message_id in zip(items, uuid7s(len(items)))]


def answer(outcomes: Sequence[PushOutcome]) -> list[PushResult]:
    """One result per item, in order (§4.1); ids are encoded as text by the encoder."""
    out: list[PushResult] = []
    partition_text: dict[int, str] = {}  # a push's items share a few partitions
    for index, outcome in enumerate(outcomes):
        item = outcome.item
        txid = item.message.transaction_id
        verdict = outcome.verdict
        if outcome.buffered:  # in the spool; the id it will be stored under (§11)
            message_id = item.message.message_id
            out.append(PushResult(index, txid, txid, item.queue, message_id, message_id,
                                  "buffered"))
        elif verdict is None:
            assert outcome.error is not None
            # message_id is always a string on the wire (§4.1); no message exists: all zeros.
            out.append(PushResult(index, txid, txid, item.queue, _NIL, _NIL, "failed",
                                  error=outcome.error.message))
        elif verdict.status != "queued":
            out.append(PushResult(index, txid, txid, item.queue, verdict.message_id,
                                  verdict.message_id, verdict.status))
        else:
            pid = verdict.partition_id
            text = partition_text.get(pid)
            if text is None:
                text = partition_text[pid] = str(pid)
            trace = item.message.trace_id
            out.append(PushResult(index, txid, txid, item.queue, verdict.message_id,
                                  verdict.message_id, "queued", partition_id=text,
                                  trace_id=str(trace) if trace else None))
    return out


def json_body(raw: bytes, settings: Settings) -> Sequence[PushItemIn | PlainPushItem]:
    """The JSON push body's items (broker/wire/push.py decodes it)."""
    return decode_json_push(raw)


def _stamp_traces(items: list[PushItem], trace_ids: list[uuid.UUID | None]) -> None:
    """Store each message under its trace. A framed message that gets one is no longer
    what its client-built frame says: it is framed again (as for a producerSub)."""
    for item, trace_id in zip(items, trace_ids):
        message = item.message
        if trace_id != message.trace_id:
            message.trace_id = trace_id
            message.packed = None


def binary_body(raw: bytes, settings: Settings) -> BinaryPush:
    """The binary push body (wire-protocol §7.2): "QPB1" | u8 flags | groups; plain groups
    (flags 4, optionally 1 = zstd) or framed groups of storage frames (flags 8), 2 =
    answer with counts. The answer is the JSON one."""
    return decode_push(raw, max_bytes=settings.max_body_bytes,
                       max_items=settings.max_push_items)


def _status(outcome: PushOutcome) -> str:
    if outcome.buffered:
        return "buffered"
    return "failed" if outcome.verdict is None else outcome.verdict.status


async def push(request: Request, body: Sequence[PushItemIn | PlainPushItem] | BinaryPush,
               identity: Identity, tenant: str) -> Response:
    if isinstance(body, BinaryPush):
        items = body.items  # decoded within the limits already
        stamp_producer(items, identity.sub)
        for item in items:
            item.tenant = tenant
        own: list[tracing.TraceParent | None] = [None] * len(items)
    else:
        limit = state_of(request).settings.max_push_items
        if len(body) > limit:
            raise PayloadTooLarge(f"{len(body)} items is over the limit of {limit} per push")
        items = to_push_items(body, identity.sub, tenant)
        own = [tracing.parse(i.traceparent) if i.traceparent else None for i in body]
    broker = broker_of(request)
    header = tracing.from_header(request.headers.get("traceparent"))
    traced = None
    if broker.tracing.enabled or header is not None or any(own):
        traced = broker.tracing.push(header, [
            (i.message.message_id, i.queue, i.message.trace_id, o) for i, o in zip(items, own)])
        _stamp_traces(items, traced.trace_ids)
    outcomes: list[PushOutcome] = []
    try:
        outcomes = await broker.push(items)
    finally:
        if traced is not None:  # an exception (503, 429) leaves every item failed
            traced.end([_status(o) for o in outcomes] or ["failed"] * len(items))
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
    return json_response(answer(outcomes), 201)
