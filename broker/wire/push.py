"""`POST /api/v1/push` (§4.1)."""

from __future__ import annotations

from typing import ClassVar, Literal

import msgspec
from msgspec import UNSET, UnsetType

from broker.wire.types import Name, NameOrEmpty, TraceParentText, TransactionId, Uuid


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
    message_id: str
    messageId: str
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
