"""Traces (§6.4): the body of `POST /api/v1/traces` and the answers of the three lookups.

Trace names and event types are labels a consumer chooses: 1 to 255 bytes without control
characters (a `Token`). A name may contain `/`: the official client puts it into the
by-name path percent-encoded except for `/`, so that route takes the rest of the path.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec
from msgspec import Meta

from broker.wire.common import Pagination
from broker.wire.types import NameOrEmpty, PartitionKey, Token, TransactionId

MAX_TRACE_NAMES = 64
TRACES_MAX_LIMIT = 1000
MAX_OFFSET = 2**62
# Where a page starts (each lookup's `offset`).
TraceOffset = Annotated[int, Meta(ge=0, le=MAX_OFFSET)]


class TraceBody(msgspec.Struct):
    MESSAGES: ClassVar[dict[str, str]] = {
        "transactionId": "transactionId is required",
        "partitionId": "partitionId is required",
        "data": "data is required"}

    transactionId: TransactionId
    partitionId: PartitionKey
    data: msgspec.Raw  # any JSON value, kept as sent
    consumerGroup: NameOrEmpty | None = None
    traceNames: Annotated[list[Token], Meta(max_length=MAX_TRACE_NAMES)] | None = None
    eventType: Token | None = None


class TraceRecorded(msgspec.Struct):
    success: bool
    traceId: str


class TracePath(msgspec.Struct):
    partitionId: str
    transactionId: TransactionId


class TraceNamePath(msgspec.Struct):
    name: Token


class TraceMessageQuery(msgspec.Struct):
    offset: TraceOffset = 0


class TracePageQuery(msgspec.Struct):
    limit: Annotated[int, Meta(ge=1, le=TRACES_MAX_LIMIT)] = 100
    offset: TraceOffset = 0


class TraceNamesQuery(msgspec.Struct):
    limit: Annotated[int, Meta(ge=1, le=TRACES_MAX_LIMIT)] = 50
    offset: TraceOffset = 0
    search: Token | None = None  # names containing this text


class TraceOut(msgspec.Struct):
    id: str
    event_type: str
    data: msgspec.Raw
    consumer_group: str
    worker_id: str | None
    created_at: str
    trace_names: list[str]


class MessageTraces(msgspec.Struct):
    traces: list[TraceOut]
    # Traces of the message follow this page (the byte budget, QUEEN_LIST_MAX_BYTES of their
    # data, or the 1000 a page holds ended it); they start at `nextOffset`.
    truncated: bool
    nextOffset: int


class NamedTraceOut(TraceOut):
    transaction_id: str
    partition_id: str
    queue_name: str | None
    partition_name: str | None
    message_payload: msgspec.Raw | None


class NamedTraces(msgspec.Struct):
    traces: list[NamedTraceOut]
    total: int
    pagination: Pagination
    # The byte budget (QUEEN_LIST_MAX_BYTES: traces' data and messages' payloads) ended the
    # page before `limit`; the next page starts at `nextOffset` (offset + the traces
    # answered), not at offset + limit. Named as in the other listings' answers.
    truncated: bool
    nextOffset: int


class TraceNameOut(msgspec.Struct):
    trace_name: str
    trace_count: int
    message_count: int
    last_seen: str


class TraceNames(msgspec.Struct):
    trace_names: list[TraceNameOut]
    total: int
    pagination: Pagination
