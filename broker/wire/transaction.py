"""`POST /api/v1/transaction` (§4.7)."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
from msgspec import UNSET, UnsetType

from broker.wire.ack import AckItemIn
from broker.wire.kv import LostRequirement
from broker.wire.push import PushItemIn
from broker.wire.types import Name, NameOrEmpty, Token, TransactionId, Uuid


class PushOp(msgspec.Struct, tag="push", tag_field="type"):
    """`{"type": "push", "items": [...]}`, or the flat form with one item's keys inline."""

    items: list[PushItemIn] | None = None
    queue: Name | None = None
    partition: NameOrEmpty | None = None
    payload: msgspec.Raw | UnsetType = UNSET
    data: msgspec.Raw | UnsetType = UNSET
    transactionId: TransactionId | None = None
    traceId: Uuid | None = None


class AckOp(AckItemIn, tag="ack", tag_field="type"):
    pass


class TransactionBody(msgspec.Struct):
    MESSAGES: ClassVar[dict[str, str]] = {"operations": "operations array is required"}

    # Required unless a rider is present (§17: then it may be empty or absent).
    operations: list[PushOp | AckOp] | None = None
    requiredLeases: list[Token] = []
    # Riders (extensions §17): `kv` is an array of §14.3 ops, checked by core.kv; `timers`
    # an array of §16.2 ops, checked by core.timers (present but not an array: 400).
    kv: Any = UNSET
    timers: Any = UNSET


class TransactionHead(TransactionBody):
    """The JSON head of a binary transaction (§7.3): the body without its pushes, which
    follow it as framed groups; a head without operations is fine."""

    operations: list[PushOp | AckOp] = []


class PushEntry(msgspec.Struct, tag="push", tag_field="type"):
    index: int
    success: bool
    transactionId: str
    messageId: str
    queueName: str
    duplicate: bool | UnsetType = UNSET


class AckEntry(msgspec.Struct, tag="ack", tag_field="type"):
    index: int
    success: bool
    transactionId: str
    error: None
    dlq: bool


class KvEntry(msgspec.Struct, tag="kv", tag_field="type"):
    """A `kv` rider op's §14.3 element (its other fields depend on the op)."""

    index: int
    opIndex: int
    op: str


class TimerEntry(msgspec.Struct, tag="timer", tag_field="type"):
    """A `timers` rider op's §16.2 element (its other fields depend on the op and status)."""

    index: int
    opIndex: int
    ok: bool
    status: str
    queue: str
    timerKey: str


class TransactionAnswer(LostRequirement):
    """Both outcomes (§4.7): success with results, or failure with an error and no results.
    A binary transaction that asked for counts (§7.3, flag 2) gets them instead of results:
    `pushed` (newly stored), `duplicate` and `acked`. A lost `required` KV precondition (§17):
    success false, with `ok` false, `reason`, `failedIndex`, `kvReason`, `version` and `value`
    as a KV batch answers it (§14.6). A refused ack op (docs/acks.md): `reason`
    "ack_rejected" and `error` naming the op; a refused `kv` rider (§14.4): `error` is its
    code, with `reason` and `detail`."""

    transactionId: str
    success: bool
    results: list[PushEntry | AckEntry | KvEntry | TimerEntry]
    error: str | UnsetType = UNSET
    detail: str | UnsetType = UNSET
    pushed: int | UnsetType = UNSET
    duplicate: int | UnsetType = UNSET
    acked: int | UnsetType = UNSET
