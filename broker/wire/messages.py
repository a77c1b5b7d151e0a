"""DLQ and message routes (§5)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from broker.wire.common import Pagination, WindowQuery
from broker.wire.types import Name, TransactionId
from core.admin.messages import LIST_MAX_PER_PARTITION

DLQ_DEFAULT_LIMIT = 100
DLQ_MAX_LIMIT = 10_000
LIST_DEFAULT_LIMIT = 200
LIST_MAX_LIMIT = 1000
MAX_OFFSET = 2**62
Status = Literal["dead_letter", "completed", "processing", "pending"]


class DlqQuery(WindowQuery):
    """The window bounds when a row failed."""

    queue: Name | UnsetType = UNSET
    consumerGroup: Name | UnsetType = UNSET
    partition: Name | UnsetType = UNSET
    limit: Annotated[int, Meta(ge=1, le=DLQ_MAX_LIMIT)] = DLQ_DEFAULT_LIMIT
    offset: Annotated[int, Meta(ge=0, le=MAX_OFFSET)] = 0


class DlqMessage(msgspec.Struct):
    id: str
    transactionId: str
    partitionId: str
    queue: str
    partition: str
    consumerGroup: str
    errorMessage: str | None
    retryCount: int
    data: msgspec.Raw
    producerSub: str | None
    createdAt: str
    failedAt: str
    messageId: str
    traceId: str | None
    offset: int
    # Present (true) only when the payload was stored encrypted and decrypted for this (§5.1).
    isEncrypted: bool | msgspec.UnsetType = msgspec.UNSET


class DlqPage(msgspec.Struct):
    messages: list[DlqMessage]
    pagination: Pagination
    total: int
    # The byte budget (QUEEN_LIST_MAX_BYTES) ended the page before `limit`; the next page
    # starts at `nextOffset` (offset + the rows answered), not at offset + limit.
    truncated: bool
    nextOffset: int


class MessagePath(msgspec.Struct):
    """A message's address. A partitionId that is not one of ours answers 404 like an
    unknown one (it is a path, not a body field)."""

    partitionId: str
    transactionId: TransactionId


class MessageOutcome(msgspec.Struct):
    """How the answers about one message begin: the outcome and the message's address."""

    success: bool
    partitionId: str
    transactionId: str


class MessageMissing(MessageOutcome):
    error: str
    message: str | UnsetType = UNSET


class Replayed(msgspec.Struct):
    index: int
    message_id: str
    transaction_id: str
    queueName: str
    status: str
    offset: int | None


class RetryAnswer(msgspec.Struct):
    success: bool
    result: str
    queue: str
    partition: str
    consumerGroup: str
    dlqId: str
    originalTransactionId: str
    replayedAs: Replayed
    dlqRowRemoved: bool


class Mode(msgspec.Struct):
    hasQueueMode: bool
    busGroupsCount: int
    type: str


class GroupState(msgspec.Struct):
    name: str
    status: str
    committedOffset: int
    leaseActive: bool
    leaseExpiresAt: str | None
    workerId: str | None
    retryCount: int


class MessageDetail(msgspec.Struct):
    id: str
    transactionId: str
    data: msgspec.Raw
    payload: msgspec.Raw
    traceId: str | None
    producerSub: str | None
    createdAt: str
    partitionId: str
    partition: str
    isEncrypted: bool
    queue: str
    queuePath: str
    namespace: str
    task: str
    offset: int | None
    status: str
    errorMessage: str | None
    retryCount: int
    leaseExpiresAt: str | None
    queueConfig: dict[str, Any]
    mode: Mode
    consumerGroups: list[GroupState]


class MessageDeleted(MessageOutcome):
    message: str


class MessagesQuery(WindowQuery):
    """The window bounds when a message was created."""

    queue: Name | UnsetType = UNSET
    partition: Name | UnsetType = UNSET
    ns: Name | UnsetType = UNSET
    namespace: Name | UnsetType = UNSET
    task: Name | UnsetType = UNSET
    status: Status | UnsetType = UNSET
    limit: Annotated[int, Meta(ge=1, le=LIST_MAX_LIMIT)] = LIST_DEFAULT_LIMIT
    # Up to the last row a page within the old bound could answer (offset 1000, limit
    # 1000): a page the byte budget cut answers a `nextOffset` below that, which must be
    # accepted.
    offset: Annotated[int, Meta(ge=0, le=LIST_MAX_PER_PARTITION + LIST_MAX_LIMIT - 1)] = 0


class BusStatus(msgspec.Struct):
    consumedBy: int
    totalGroups: int


class ListedMessage(msgspec.Struct):
    id: str
    transactionId: str
    partitionId: str
    queuePath: str
    queue: str
    partition: str
    namespace: str
    task: str
    offset: int | None
    status: str
    queueStatus: str
    busStatus: BusStatus
    traceId: str | None
    producerSub: str | None
    queuePriority: int
    createdAt: str
    leaseExpiresAt: str | None
    data: msgspec.Raw
    payload: msgspec.Raw


class MessageList(msgspec.Struct):
    messages: list[ListedMessage]
    mode: Mode
    total: int
    pagination: Pagination
    # The byte budget (QUEEN_LIST_MAX_BYTES, each payload counted twice: it goes out as
    # `data` and `payload`) ended the page before `limit`; the next page starts at
    # `nextOffset` (offset + the rows the page took), not at offset + limit.
    truncated: bool
    nextOffset: int


class DlqIdPath(msgspec.Struct):
    """`/api/v1/dlq/{id}/replay`: a DLQ row's own id (decimal text, as listed)."""

    id: Annotated[str, Meta(pattern=r"^[0-9]{1,18}$")]


class DlqReplayBody(msgspec.Struct):
    """An optional destination other than the dead letter's own queue and partition."""

    queue: Name | UnsetType = UNSET
    partition: Name | UnsetType = UNSET


class DlqMissing(msgspec.Struct):
    success: bool
    dlqId: str
    error: str


class DlqPurgeQuery(msgspec.Struct):
    queue: Name  # mandatory (§11): a purge of every queue's dead letters is not offered
    consumerGroup: Name | UnsetType = UNSET


class DlqPurged(msgspec.Struct):
    success: bool
    deleted: int
    queue: str
    consumerGroup: str | None
