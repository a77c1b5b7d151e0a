"""Ephemeral queue routes (wire-protocol-extensions §19): bodies, query strings, answers.

Limits that §19 clamps (pop `batch`, `timeout`) are plain integers here and clamped by the
route; limits it refuses (10 000 messages or acks per call, names) are checked as decoded.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, UnsetType

from broker.wire.common import ErrorBody
from broker.wire.types import EphemeralName
from core.ephemeral.service import EphemeralGroupDepth, EphemeralPartitionDepth

MAX_ITEMS = 10_000


class EphemeralFailure(ErrorBody):
    """Every refusal of §19: `{"error": text, "code": code}`."""

    code: str

    @classmethod
    def bad_request(cls, error: str) -> EphemeralFailure:
        return cls(error, "ephemeral_bad_request")


class EphPushedMessage(msgspec.Struct):
    payload: msgspec.Raw  # any JSON, re-emitted byte for byte


class EphPushBody(msgspec.Struct):
    queue: EphemeralName
    messages: Annotated[list[EphPushedMessage], Meta(max_length=MAX_ITEMS)]
    partition: EphemeralName | UnsetType = UNSET


class EphPushAnswer(msgspec.Struct):
    pushed: int


class EphPopQuery(msgspec.Struct):
    queue: EphemeralName
    partition: EphemeralName | UnsetType = UNSET
    group: EphemeralName | UnsetType = UNSET
    batch: int = 1
    wait: bool = False
    timeout: int | UnsetType = UNSET
    autoAck: bool = False


class EphPoppedMessage(msgspec.Struct):
    id: str
    partition: str
    attempts: int
    payload: msgspec.Raw


class EphPopAnswer(msgspec.Struct):
    queue: str
    messages: list[EphPoppedMessage]


class EphAckEntry(msgspec.Struct):
    id: str
    status: str | None = None
    error: Any = None  # ignored (§19.5)


class EphAckBody(msgspec.Struct):
    queue: EphemeralName
    acks: Annotated[list[EphAckEntry], Meta(max_length=MAX_ITEMS)]
    group: EphemeralName | UnsetType = UNSET


class EphAckResult(msgspec.Struct):
    id: str
    outcome: str


class EphAckAnswer(msgspec.Struct):
    results: list[EphAckResult]


class EphConfigureBody(msgspec.Struct):
    queue: EphemeralName
    # Checked by core.ephemeral.model (its refusals name the allowed keys).
    options: Any = None


class EphConfigureAnswer(msgspec.Struct):
    queue: str
    options: Any
    updatedAt: str


class EphQueueBody(msgspec.Struct):
    queue: EphemeralName


class EphQueuePath(msgspec.Struct):
    queue: EphemeralName


class EphResetAnswer(msgspec.Struct):
    queue: str
    dropped: int


class EphDeleteAnswer(msgspec.Struct):
    queue: str
    deleted: bool
    declared: bool


class EphWindowOut(msgspec.Struct):
    ms: int
    count: int


class EphOptionsOut(msgspec.Struct):
    maxBytes: int
    maxLength: int
    policy: str
    ttlSeconds: int
    leaseSeconds: int
    retryLimit: int
    windowBuffer: EphWindowOut


class EphDrops(msgspec.Struct):
    bounds: int
    ttl: int
    retry: int


class EphListedQueue(msgspec.Struct):
    queue: str
    tier: str
    depth: int
    bytes: int
    partitions: int
    groups: int
    drops: EphDrops
    options: EphOptionsOut


class EphQueuesAnswer(msgspec.Struct):
    queues: list[EphListedQueue]
    count: int
    cellBytes: int


class EphDepthQuery(msgspec.Struct):
    group: EphemeralName | UnsetType = UNSET


class EphDepthAnswer(msgspec.Struct):
    queue: str
    group: str | None
    tier: str
    pending: int
    partitionsPending: int
    bytes: int
    # The domain's own rows: on the wire they are just as the domain has them.
    partitions: list[EphemeralPartitionDepth]
    groups: list[EphemeralGroupDepth]
