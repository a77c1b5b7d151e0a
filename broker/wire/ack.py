"""`POST /api/v1/ack` (§4.5), `POST /api/v1/ack/batch` (§4.6), lease extension (§4.8)."""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from broker.wire.types import (
    NameOrEmpty,
    PartitionKey,
    Text,
    Token,
    TraceParentText,
    TransactionId,
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
