"""Consumer-group routes (§6.1)."""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec
from msgspec import Meta

from broker.wire.types import Name, Timestamp


class GroupPath(msgspec.Struct):
    group: Name


class GroupQueuePath(msgspec.Struct):
    group: Name
    queue: Name


class GroupPartitionPath(msgspec.Struct):
    group: Name
    queue: Name
    partition: Name


class LaggingQuery(msgspec.Struct):
    minLagSeconds: Annotated[int, Meta(ge=0, le=2**31 - 1)] = 3600


class DeleteGroupQuery(msgspec.Struct):
    deleteMetadata: bool = True


class SeekBody(msgspec.Struct):
    toEnd: bool | None = None
    timestamp: Timestamp | None = None


class SubscriptionBody(msgspec.Struct):
    MESSAGES: ClassVar[dict[str, str]] = {"subscriptionTimestamp": "subscriptionTimestamp (ISO-8601) is required"}

    subscriptionTimestamp: Timestamp


class GroupSummaryOut(msgspec.Struct):
    name: str
    topics: list[str]
    queueName: str
    members: int
    partitionsWithLag: int
    totalLag: None
    offsetLag: int
    maxTimeLag: float
    state: str
    subscriptionMode: str | None
    subscriptionTimestamp: str | None
    subscriptionCreatedAt: str | None
    conflation: bool  # the group's stored policy on the queue (extensions §20.2)


class LaggingOut(msgspec.Struct):
    consumer_group: str
    queue_name: str
    partition_name: str
    partition_id: str
    worker_id: str | None
    offset_lag: int
    time_lag_seconds: int
    lag_hours: float
    oldest_unconsumed_at: str | None
    last_consumed_at: str | None


class GroupPartitionOut(msgspec.Struct):
    partition: str
    partitionId: str
    workerId: str | None
    lastConsumedAt: str | None
    totalConsumed: int
    committedOffset: int
    offsetLag: int
    timeLagSeconds: int
    leaseActive: bool
    evicted: int  # messages skipped because they waited longer than maxWaitTimeSeconds
    # False for a partition the group has not read yet: committedOffset is then where its
    # subscription rule starts it, and the lag counts what its next pops will deliver.
    hasCursor: bool


class GroupQueueOut(msgspec.Struct):
    partitions: list[GroupPartitionOut]


GroupDetail = dict[str, GroupQueueOut]


class GroupDeleted(msgspec.Struct):
    success: bool
    consumerGroup: str
    deletedPartitions: int
    metadataDeleted: bool
    subscriptionsDeleted: int


class GroupQueueDeleted(msgspec.Struct):
    success: bool
    consumerGroup: str
    queueName: str
    deletedPartitions: int
    metadataDeleted: bool
    subscriptionsDeleted: int


class QueueSeekAnswer(msgspec.Struct):
    success: bool
    consumerGroup: str
    queueName: str
    seekToEnd: bool
    targetTimestamp: str | None
    partitionsUpdated: int


class PartitionSeekAnswer(msgspec.Struct):
    success: bool
    consumerGroup: str
    queueName: str
    partitionName: str
    updated: bool
    cursorMovedTo: int | None
    seekToEnd: bool
    targetTimestamp: str | None


class SubscriptionAnswer(msgspec.Struct):
    success: bool
    consumerGroup: str
    newTimestamp: str
    rowsUpdated: int
