"""Resource, status, health and metrics routes (§6.2, §6.3, §6.5)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from broker.wire.common import Pagination, WindowQuery
from broker.wire.messages import MAX_OFFSET
from broker.wire.types import Name

DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000


class PageQuery(msgspec.Struct):
    limit: Annotated[int, Meta(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT
    offset: Annotated[int, Meta(ge=0, le=MAX_OFFSET)] = 0


class QueueFilterQuery(WindowQuery):
    """Filters of the queue lists and status routes (§6.2, §6.3); `from`/`to` bound the
    queues' creation time on the lists, the throughput window on `/status`."""

    queue: Name | UnsetType = UNSET
    namespace: Name | UnsetType = UNSET
    task: Name | UnsetType = UNSET


class StatusQuery(QueueFilterQuery):
    pass


class StatusQueuesQuery(QueueFilterQuery):
    limit: Annotated[int, Meta(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT
    offset: Annotated[int, Meta(ge=0, le=MAX_OFFSET)] = 0


class QueueListQuery(StatusQueuesQuery):
    search: Name | UnsetType = UNSET


class PartitionListQuery(PageQuery):
    queue: Name | UnsetType = UNSET


class DepthQuery(msgspec.Struct):
    group: Name | UnsetType = UNSET


class StatusMessagesQuery(msgspec.Struct):
    limit: Annotated[int, Meta(ge=1, le=1000)] = 50
    offset: Annotated[int, Meta(ge=0, le=1000)] = 0


class AnalyticsQuery(QueueFilterQuery):
    interval: Literal["minute", "hour", "day", "week", "month"] = "hour"


class AnalyticsBucket(msgspec.Struct):
    at: str
    pushed: int
    delivered: int
    acked: int
    failed: int
    deadLettered: int
    depth: int
    lagSeconds: float


class Analytics(msgspec.Struct):
    interval: str
    # `from` is a keyword in Python; the wire name is `from`
    from_: str = msgspec.field(name="from")
    to: str
    queue: str | None
    namespace: str | None
    task: str | None
    sampleIntervalMs: int
    buckets: list[AnalyticsBucket]


class MessageCounts(msgspec.Struct):
    total: int
    pending: int
    processing: int


class QueueSummary(msgspec.Struct):
    id: str
    name: str
    namespace: str
    task: str
    createdAt: str
    partitions: int
    messages: MessageCounts


class QueueList(msgspec.Struct):
    queues: list[QueueSummary]
    total: int
    pagination: Pagination


class Stats(msgspec.Struct):
    total: int
    pending: int
    processing: int
    completed: int
    failed: int
    deadLetter: int


class TotalStats(Stats):
    partitions: int


class PartitionDetail(msgspec.Struct):
    id: str
    name: str
    createdAt: str
    stats: Stats
    lastOffset: int
    logStart: int
    oldestMessage: str | None
    newestMessage: str | None


class SegmentCounts(msgspec.Struct):
    segments: int
    messages: int


class QueueDetail(msgspec.Struct):
    id: str
    name: str
    namespace: str
    task: str
    createdAt: str
    partitions: list[PartitionDetail]
    totals: TotalStats
    segments: SegmentCounts
    options: dict[str, Any]


class PartitionDepth(msgspec.Struct):
    partition: str
    pending: int


class QueueDepth(msgspec.Struct):
    queue: str
    group: str | None
    pending: int
    partitionsPending: int
    conflation: bool
    effectivePending: int
    partitions: list[PartitionDepth]


class PartitionRow(msgspec.Struct):
    id: str
    name: str
    queue: str
    lastOffset: int
    logStart: int
    messages: int
    createdAt: str
    lastWriteAt: str | None


class PartitionList(msgspec.Struct):
    partitions: list[PartitionRow]
    pagination: Pagination


class PendingCounts(msgspec.Struct):
    total: int
    pending: int


class NamespaceRow(msgspec.Struct):
    namespace: str
    queues: int
    partitions: int
    messages: PendingCounts


class TaskRow(msgspec.Struct):
    task: str
    queues: int
    partitions: int
    messages: PendingCounts


class NamespaceList(msgspec.Struct):
    namespaces: list[NamespaceRow]


class TaskList(msgspec.Struct):
    tasks: list[TaskRow]


class Health(msgspec.Struct):
    status: str
    database: str
    version: str
