"""`POST /api/v1/ack` (§4.5), `POST /api/v1/ack/batch` (§4.6), lease extension (§4.8)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, ClassVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from broker.wire.bulk_checks import each_distinct, transaction_ids_pass
from broker.wire.decoding import decode_body
from broker.wire.types import (
    NameOrEmpty,
    PartitionKey,
    Text,
    Token,
    TraceParentText,
    TransactionId,
    check_of,
)

MAX_LEASE_SECONDS = 86400


class AckItemIn(msgspec.Struct):
    transactionId: TransactionId
    partitionId: PartitionKey
    # The vocabulary is open (§4.5): unknown words count as failed; true/false as the
    # official client's booleans.
    status: str | bool | None = None
    leaseId: Token | None = None  # absent or empty: no lease check
    error: Text | None = None
    consumerGroup: NameOrEmpty | None = None  # on a batch item: its own group
    # The trace context the consumer got with the message (its pop's `traceparent`)
    traceparent: TraceParentText | None = None


class AckBatchBody(msgspec.Struct):
    MESSAGES: ClassVar[dict[str, str]] = {
        "acknowledgments": "acknowledgments array is required"}

    acknowledgments: list[AckItemIn]
    consumerGroup: NameOrEmpty | None = None


class AckResult(msgspec.Struct):
    index: int
    transactionId: str
    success: bool
    error: str | None
    leaseReleased: bool
    dlq: bool
    noop: bool | UnsetType = UNSET
    conflated: int | UnsetType = UNSET  # superseded messages retired (extensions §20.3)


class LeasePath(msgspec.Struct):
    leaseId: Token


class ExtendBody(msgspec.Struct):
    seconds: Annotated[float, Meta(gt=0, le=MAX_LEASE_SECONDS)] = 60


class ExtendAnswer(msgspec.Struct):
    leaseId: str
    success: bool
    renewed: int
    newExpiresAt: str | None
    expiresAt: str | None
    lease_expires_at: str | None
    error: str | UnsetType = UNSET


# --- decoding an ack batch ----------------------------------------------------------------

class PlainAckItem(msgspec.Struct):
    """`AckItemIn` with plain strings, as the fast path decodes it (`decode_ack_batch`)."""

    transactionId: str
    partitionId: str
    status: str | bool | None = None
    leaseId: str | None = None
    error: str | None = None
    consumerGroup: str | None = None
    traceparent: str | None = None


class PlainAckBatch(msgspec.Struct):
    acknowledgments: list[PlainAckItem]
    consumerGroup: str | None = None


_PLAIN = msgspec.json.Decoder(PlainAckBatch)
_PARTITION_KEY, _TOKEN, _TEXT = check_of(PartitionKey), check_of(Token), check_of(Text)
_NAME_OR_EMPTY = check_of(NameOrEmpty)


def decode_ack_batch(raw: bytes) -> AckBatchBody | PlainAckBatch:
    """An ack batch body, checked as `AckBatchBody` checks it.

    The acks of a pop share their group, lease and a few partitions: the fast path decodes
    plain strings and checks each distinct value once and all transactionIds in one pass; a
    body it cannot pass whole is decoded again by `decode_body`, whose per-field checks
    word the refusal (both paths accept the same bodies, tests/unit/test_ack_decoding.py)."""
    body = _plain_batch(raw)
    return decode_body(raw, AckBatchBody) if body is None else body


def _plain_batch(raw: bytes) -> PlainAckBatch | None:
    if not raw.isascii():
        try:
            raw.decode("utf-8")  # as decode_body checks it
        except UnicodeDecodeError:
            return None
    try:
        body = _PLAIN.decode(raw or b"{}")
    except (msgspec.DecodeError, RecursionError):
        return None
    items: Sequence[PlainAckItem] = body.acknowledgments
    if any(item.traceparent for item in items):
        return None  # rare: the strict path checks each and words a refusal
    try:
        if not transaction_ids_pass([item.transactionId for item in items]):
            return None
        each_distinct((item.partitionId for item in items), _PARTITION_KEY)
        each_distinct((item.leaseId for item in items), _TOKEN)
        each_distinct((item.error for item in items), _TEXT)
        each_distinct([body.consumerGroup, *(item.consumerGroup for item in items)],
                      _NAME_OR_EMPTY)
    except (ValueError, TypeError):
        return None
    return body
