"""`POST /api/v1/fetch` (§6.6): offset reads."""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from broker.wire.types import Name, NameOrNumber

MAX_ENTRIES = 1024
DEFAULT_MAX_BYTES = 1024 * 1024
MAX_MAX_BYTES = 8 * 1024 * 1024
MAX_WAIT_MS = 30000


class FetchEntryIn(msgspec.Struct):
    queue: Name
    partition: NameOrNumber | None = None  # absent: `Default`
    offset: Annotated[int, Meta(ge=0, le=2**62)] = 0
    maxBytes: Annotated[int, Meta(ge=1, le=MAX_MAX_BYTES)] = DEFAULT_MAX_BYTES


class FetchBody(msgspec.Struct):
    MESSAGES: ClassVar[dict[str, str]] = {"entries": "entries array is required"}

    entries: list[FetchEntryIn]
    maxWaitMs: Annotated[int, Meta(ge=0, le=MAX_WAIT_MS)] = 0
    maxBytes: Annotated[int, Meta(ge=1, le=64 * MAX_MAX_BYTES)] = MAX_MAX_BYTES
    minBytes: int | None = None  # accepted, not used: an answer never waits for more bytes


class FetchRecord(msgspec.Struct):
    offset: int
    transactionId: str
    payload: msgspec.Raw
    ts: str
    producerSub: str | None = None  # the producer's JWT `sub` (§9); not in §6.6's list


class FetchEntryOut(msgspec.Struct):
    queue: str
    partition: str
    records: list[FetchRecord]
    highWatermark: int
    logStartOffset: int
    error: str | UnsetType = UNSET


class FetchAnswer(msgspec.Struct):
    entries: list[FetchEntryOut]
