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
    """Absent values take the defaults of §4.2 (some come from the broker's settings). The
    descriptions are the API reference's (docs/reference/http-api.md is generated from them)."""

    batch: Annotated[int, Meta(ge=1, le=MAX_BATCH, description=(
        "Most messages this pop delivers, over every partition it claims. Absent: "
        "DEFAULT_BATCH_SIZE, or the broker's choice with autopilot=true"))] | UnsetType = UNSET
    partitions: Annotated[int, Meta(ge=1, le=MAX_PARTITIONS, description=(
        "Most partitions this pop claims, all under one leaseId. Absent: 1, or the "
        "autopilot's width with autopilot=true (extensions §20.5)"))] | UnsetType = UNSET
    wait: Annotated[bool, Meta(description=(
        "Long poll: with nothing to deliver, wait for a push until `timeout`, then 204"))] = False
    timeout: Annotated[int, Meta(ge=0, le=MAX_TIMEOUT_MS, description=(
        "Long-poll deadline in ms. Absent: DEFAULT_TIMEOUT (30000)"))] | UnsetType = UNSET
    consumerGroup: Annotated[Name, Meta(description=(
        "The consumer group; absent or empty: __QUEUE_MODE__, one shared cursor of "
        "competing consumers"))] | UnsetType = UNSET
    autoAck: Annotated[bool, Meta(description=(
        "Commit at delivery: no lease, leaseId empty, never delivered again (at most "
        "once)"))] = False
    subscriptionMode: Annotated[Name, Meta(description=(
        "Where a named group starts on a partition it meets for the first time: all (the "
        "oldest retained message), or new / new-only (the tail). Absent: "
        "DEFAULT_SUBSCRIPTION_MODE"))] | UnsetType = UNSET
    subscriptionFrom: Annotated[SubscriptionFrom, Meta(description=(
        "First contact starts at this instant (ISO-8601), or at the tail with now"))] \
        | UnsetType = UNSET
    leaseSeconds: Annotated[int, Meta(ge=0, le=MAX_TIMEOUT_MS // 1000, description=(
        "Lease length for this pop; 0: the queue's leaseTime (or 60 s when that is 0)"))] = 0
    autopilot: Annotated[bool, Meta(description=(
        "Let the broker choose an absent batch and partitions; the answer echoes them in "
        "`autopilot`"))] = False
    frames: Annotated[bool, Meta(description=(
        "Answer framed (§7.4, application/x-queen-pop) instead of JSON"))] = False
    conflation: Annotated[bool, Meta(description=(
        "Last-value delivery for the group: each claimed partition delivers only its "
        "newest message (extensions §20); needs a named group, not autoAck"))] = False
    namespace: Annotated[Name, Meta(description=(
        "Discovery pop (GET /api/v1/pop): queues of this namespace; ignored on the queue "
        "routes"))] | UnsetType = UNSET
    task: Annotated[Name, Meta(description=(
        "Discovery pop: queues of this task; ignored on the queue routes"))] | UnsetType = UNSET


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
    # W3C trace context to continue the message's trace with (core/tracing.py); only for a
    # message that has a trace
    traceparent: str | UnsetType = UNSET


class Autopilot(msgspec.Struct):
    partitions: int
    batch: int
    waitMs: int


class PopHead(msgspec.Struct):
    """The keys a pop answer starts with, before its messages (`PopAnswer`, and
    `SplicedPopAnswer` in broker/wire/pop_json.py)."""

    success: bool
    queue: str
    partition: str
    partitionId: str
    leaseId: str
    consumerGroup: str


class PopAnswer(PopHead):
    messages: list[PoppedMessage]
    partitionsClaimed: int
    autopilot: Autopilot | UnsetType = UNSET
    # Extensions §20.2/§20.4, each only when true.
    conflation: bool | UnsetType = UNSET
    conflationConflict: bool | UnsetType = UNSET
    paused: bool | UnsetType = UNSET
