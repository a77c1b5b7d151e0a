"""Bodies of the timer routes (wire-protocol-extensions §16).

The Structs document the routes (OpenAPI; the batch body is `Operations` of `TimerOpIn`).
`POST /api/v1/timers` is decoded by
`decode_timers` into plain JSON values instead, because a bare array is as valid as
`{"operations": [...]}` and every refusal has its own §16.2 code, which `core.timers.ops`
checks in input order. Path and query fields are plain strings for the same reason: the
routes check them and answer with the timer codes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from broker.wire.common import Operations
from broker.wire.decoding import decode_values
from core.settings import Settings
from core.timers.ops import BAD


def decode_timers(raw: bytes, settings: Settings) -> Any:
    return decode_values(raw, BAD, "timers_bad_body")


NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class TimerOpIn(msgspec.Struct):
    """One timer op (§16.2); `delayMs`, `txn`, `payload` are required for a schedule."""

    op: Literal["schedule", "reschedule", "cancel"]
    queue: str
    timerKey: str
    partition: str | UnsetType = UNSET
    delayMs: int | UnsetType = UNSET
    txn: str | UnsetType = UNSET
    payload: str | UnsetType = UNSET  # standard base64 of the message bytes
    payloadZstd: bool | UnsetType = UNSET
    encrypted: bool | UnsetType = UNSET


class TimersBody(Operations[TimerOpIn]):
    """Timer ops (§16.2): `{"operations": [...]}` or the bare array."""


class TimerResult(msgspec.Struct):
    """One op's verdict: scheduled | rescheduled | cancelled | absent | too_late."""

    ok: bool
    status: str
    queue: str
    timerKey: str
    txn: str | None = None
    messageId: str | UnsetType = UNSET
    deliverAt: str | UnsetType = UNSET


class TimersResults(msgspec.Struct):
    results: list[TimerResult]


class TimerPath(msgspec.Struct):
    """`/api/v1/timers/{queue}/{timerKey…}`: the queue is the first raw segment, percent-
    decoded (so it may hold an encoded `/`), the key the decoded rest, slashes included."""

    queue: NonEmpty
    timerKey: NonEmpty


class TimerQueuePath(msgspec.Struct):
    queue: NonEmpty


class CancelQuery(msgspec.Struct):
    txn: str | UnsetType = UNSET  # echoed on `absent`


class TimerListQuery(msgspec.Struct):
    """List (`after`, `limit` 1..1000, default 100) or, with `mode=count`, count the keys
    starting with `prefix`."""

    after: str | UnsetType = UNSET
    limit: str | UnsetType = UNSET
    mode: str | UnsetType = UNSET
    prefix: str | UnsetType = UNSET


class TimerRowOut(msgspec.Struct):
    found: bool
    queue: str
    timerKey: str
    partition: str | UnsetType = UNSET
    deliverAt: str | UnsetType = UNSET
    txn: str | UnsetType = UNSET
    messageId: str | UnsetType = UNSET
    payload: str | UnsetType = UNSET  # base64 as stored (never decrypted); peek only
    payloadZstd: bool | UnsetType = UNSET
    encrypted: bool | UnsetType = UNSET
    producerSub: str | None | UnsetType = UNSET
    attempts: int | UnsetType = UNSET
    lastError: str | None | UnsetType = UNSET
    claimed: bool | UnsetType = UNSET  # a fire holds it now
    createdAt: str | UnsetType = UNSET
    updatedAt: str | UnsetType = UNSET


class TimerListOrCount(msgspec.Struct):
    """A page (`rows`, `truncated`, `nextAfter`) or, with `mode=count`, `count`."""

    rows: list[TimerRowOut] | UnsetType = UNSET
    truncated: bool | UnsetType = UNSET
    nextAfter: str | None | UnsetType = UNSET
    count: int | UnsetType = UNSET


class TimerQueueOut(msgspec.Struct):
    queue: str
    pending: int
    nextDue: str
    failing: int  # timers that failed to fire at least once (in backoff)


class TimerQueues(msgspec.Struct):
    queues: list[TimerQueueOut]
    truncated: bool
    nextAfter: str | None
