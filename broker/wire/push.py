"""`POST /api/v1/push` (§4.1)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import ClassVar, Literal

import msgspec
from msgspec import UNSET, UnsetType

from broker.wire.bulk_checks import each_distinct, transaction_ids_pass
from broker.wire.decoding import decode_body, may_hold_a_long_integer
from broker.wire.types import (
    Name,
    NameOrEmpty,
    TraceParentText,
    TransactionId,
    Uuid,
    check_name_or_empty,
    check_uuid,
)
from core.names import check_name


class PushItemIn(msgspec.Struct):
    queue: Name
    partition: NameOrEmpty | None = None  # absent or empty: `Default`
    payload: msgspec.Raw | UnsetType = UNSET  # any JSON, kept as sent
    data: msgspec.Raw | UnsetType = UNSET  # accepted in place of payload
    transactionId: TransactionId | None = None  # absent or empty: the message id's text
    traceId: Uuid | None = None
    # This message's W3C trace context (core/tracing.py); wins over traceId and the header
    traceparent: TraceParentText | None = None


class PushBody(msgspec.Struct):
    MESSAGES: ClassVar[dict[str, str]] = {"items": "items array is required"}

    items: list[PushItemIn]


class PushResult(msgspec.Struct):
    index: int
    transaction_id: str
    transactionId: str
    queueName: str
    message_id: uuid.UUID
    messageId: uuid.UUID
    status: Literal["queued", "duplicate", "failed", "buffered"]
    partition_id: str | UnsetType = UNSET
    trace_id: str | None | UnsetType = UNSET
    error: str | UnsetType = UNSET


class PushCounts(msgspec.Struct):
    """The answer to a binary push that asked for counts (§7.2, flag 2): how many items,
    how many stored, how many were duplicates, the first failure's text (`null` when none
    failed), and, only when some did, how many went to the push spool (`buffered`, §11;
    failed = count - queued - duplicate - buffered)."""

    count: int
    queued: int
    duplicate: int
    error: str | None
    buffered: int | UnsetType = UNSET


# --- decoding a JSON push body -------------------------------------------------------------

class PlainPushItem(msgspec.Struct):
    """`PushItemIn` with plain strings, as the fast path decodes it (`decode_json_push`):
    its values are checked together once the whole body is decoded."""

    queue: str
    partition: str | None = None
    payload: msgspec.Raw | UnsetType = UNSET
    data: msgspec.Raw | UnsetType = UNSET
    transactionId: str | None = None
    traceId: str | None = None
    traceparent: str | None = None


class PlainPushBody(msgspec.Struct):
    items: list[PlainPushItem]


_PLAIN = msgspec.json.Decoder(PlainPushBody)


def decode_json_push(raw: bytes) -> Sequence[PushItemIn | PlainPushItem]:
    """The items of a JSON push body, checked as `PushItemIn` checks them.

    A push carries many items that mostly share their queue and partition: the fast path
    decodes plain strings and checks each distinct name once and all transactionIds in one
    pass, instead of a check per field of every item. A body it cannot pass whole is decoded
    again by `decode_body` into `PushBody`, whose per-field checks word the refusal, so both
    paths accept the same bodies and refuse them in the same words."""
    items = _plain_items(raw)
    return decode_body(raw, PushBody).items if items is None else items


def _plain_items(raw: bytes) -> list[PlainPushItem] | None:
    if may_hold_a_long_integer(raw):
        return None  # decode_body tells a long integer from a string of digits
    if not raw.isascii():
        try:
            raw.decode("utf-8")  # as decode_body checks it (payloads are kept raw)
        except UnicodeDecodeError:
            return None
    try:
        items = _PLAIN.decode(raw or b"{}").items
    except (msgspec.DecodeError, RecursionError):
        return None
    try:
        each_distinct((item.queue for item in items), check_name)
        each_distinct((item.partition for item in items), check_name_or_empty)
        if not transaction_ids_pass([item.transactionId or "" for item in items]):
            return None
        for item in items:
            if item.traceparent:  # rare: the strict path checks and words it
                return None
            if item.traceId:  # rare: checked one by one, in canonical form as Uuid has it
                item.traceId = check_uuid(item.traceId)
    except (ValueError, TypeError):
        return None
    return items
