"""Streams (wire-protocol-extensions §18): bodies of `/streams/v1/*`.

Field names are the client's snake_case. Required fields default to empty here so that the
route can answer the protocol's fixed texts (`name is required`, in the protocol's order)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from broker.wire.types import NameOrEmpty, Text, Token, TransactionId, Uuid


class RegisterBody(msgspec.Struct):
    name: Text | None = None
    source_queue: NameOrEmpty | None = None
    sink_queue: NameOrEmpty | None = None  # empty: none
    config_hash: Text | None = None
    reset: bool = False


class RegisterAnswer(msgspec.Struct):
    success: bool
    query_id: str
    name: str
    config_hash: str
    fresh: bool
    reset: bool


class RegisterConflict(msgspec.Struct):
    """409: the stored chain has another hash and the call did not ask for a reset."""

    success: bool
    query_id: str
    name: str
    error: str


class StateGetBody(msgspec.Struct):
    query_id: Text | None = None
    partition_id: Text | None = None
    keys: list[Text] | None = None  # absent, null or []: no key filter
    key_prefix: Text | None = None  # literal; empty: none
    ripe_at_or_before: int | float | None = None  # epoch ms, against value.windowEnd


class StateRowOut(msgspec.Struct):
    key: str
    value: msgspec.Raw
    updated_at: str


class StateAnswer(msgspec.Struct):
    success: bool
    rows: list[StateRowOut]
    error: str | UnsetType = UNSET


class StateOpIn(msgspec.Struct):
    type: str  # upsert | delete; any other fails the cycle (400)
    key: Text
    value: msgspec.Raw | UnsetType = UNSET  # upsert: missing = {}


class StreamPushItemIn(msgspec.Struct):
    queue: NameOrEmpty | None = None  # empty: the item is skipped
    partition: NameOrEmpty | None = None  # absent or empty: `Default`
    payload: msgspec.Raw | UnsetType = UNSET
    data: msgspec.Raw | UnsetType = UNSET  # accepted in place of payload
    transactionId: TransactionId | None = None  # absent: derived from the cycle (docs/guide/streams.md)
    messageId: Uuid | None = None


class AckIn(msgspec.Struct):
    transactionId: TransactionId | None = None  # the last acked message's (informational)
    leaseId: Token | None = None
    status: str | None = None  # completed/success/acked/ok/absent = ok; else nack
    count: Annotated[int, Meta(ge=0)] = 0


class CycleBody(msgspec.Struct):
    query_id: Text | None = None
    partition_id: Text | None = None
    consumer_group: NameOrEmpty | None = None  # absent: __QUEUE_MODE__
    state_ops: list[StateOpIn] = []
    push_items: list[StreamPushItemIn] = []
    ack: AckIn | None = None
    release_lease: bool = True


class PushResultOut(msgspec.Struct):
    queue: str
    partition: str
    status: Literal["queued", "duplicate"]
    queued: int
    duplicate: int
    message_ids: list[str]


class AckResultOut(msgspec.Struct):
    success: bool
    count: int
    lease_released: bool
    dlq: bool


class CycleAnswer(msgspec.Struct):
    success: bool
    query_id: str
    partition_id: str
    queueName: str | None = None
    state_ops_applied: int = 0
    push_results: list[PushResultOut] = []
    ack_result: AckResultOut | None = None
    error: str | UnsetType = UNSET


class QueryNamePath(msgspec.Struct):
    name: Text


class QueryDeleted(msgspec.Struct):
    deleted: bool
    name: str


class QueryPartitionOut(msgspec.Struct):
    partitionId: str
    partition: str | None
    cycles: int
    lastCycleAt: str | None
    stateKeys: int
    stateBytes: int


class QueryOut(msgspec.Struct):
    queryId: str
    name: str
    sourceQueue: str
    sinkQueue: str | None
    configHash: str
    createdAt: str
    partitions: list[QueryPartitionOut]


class QueryList(msgspec.Struct):
    queries: list[QueryOut]
