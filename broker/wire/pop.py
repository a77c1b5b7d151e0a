"""Pop routes (§4.2-4.4): path and query parameters, and the answer."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import UNSET, Meta, UnsetType

from broker.wire.types import Name, SubscriptionFrom

MAX_BATCH = 10000
MAX_PARTITIONS = 1000
MAX_TIMEOUT_MS = 3_600_000


class QueuePartitionPath(msgspec.Struct):
    queue: Name
    partition: Name


class PopQuery(msgspec.Struct):
    """Absent values take the defaults of §4.2 (some come from the broker's settings)."""

    batch: Annotated[int, Meta(ge=1, le=MAX_BATCH)] | UnsetType = UNSET
    # Absent: 1, or the autopilot's width with autopilot=true (extensions §20.5).
    partitions: Annotated[int, Meta(ge=1, le=MAX_PARTITIONS)] | UnsetType = UNSET
    wait: bool = False
    timeout: Annotated[int, Meta(ge=0, le=MAX_TIMEOUT_MS)] | UnsetType = UNSET
    consumerGroup: Name | UnsetType = UNSET
    autoAck: bool = False
    subscriptionMode: Name | UnsetType = UNSET
    subscriptionFrom: SubscriptionFrom | UnsetType = UNSET
    leaseSeconds: Annotated[int, Meta(ge=0, le=MAX_TIMEOUT_MS // 1000)] = 0
    autopilot: bool = False
    frames: bool = False  # answer framed (§7.4, `application/x-queen-pop`) instead of JSON
    conflation: bool = False  # last-value delivery for the group (extensions §20)
    namespace: Name | UnsetType = UNSET
    task: Name | UnsetType = UNSET


class DiscoveryFailure(msgspec.Struct):
    """The 400 of the discovery pop (§4.4)."""

    success: bool
    error: str
    messages: list[None]

    @classmethod
    def of(cls, error: str) -> DiscoveryFailure:
        return cls(False, error, [])


class PoppedMessage(msgspec.Struct):
    """One delivered message, keys in the order of §3."""

    id: str
    transactionId: str
    traceId: str | None
    data: msgspec.Raw
    producerSub: str | None
    createdAt: str
    partitionId: str
    partition: str
    leaseId: str
    consumerGroup: str


class Autopilot(msgspec.Struct):
    partitions: int
    batch: int
    waitMs: int


class PopAnswer(msgspec.Struct):
    success: bool
    queue: str
    partition: str
    partitionId: str
    leaseId: str
    consumerGroup: str
    messages: list[PoppedMessage]
    partitionsClaimed: int
    autopilot: Autopilot | UnsetType = UNSET
    # Extensions §20.2/§20.4, each only when true.
    conflation: bool | UnsetType = UNSET
    conflationConflict: bool | UnsetType = UNSET
    paused: bool | UnsetType = UNSET
