"""Typed calls of the admin statements: consumer groups and resources
(schema/queries/admin.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.storage.statements import Conn, Statement


@dataclass(frozen=True, slots=True)
class GroupCursor:
    """Where a group stands on a partition it reads, with its queue, offset lag, lease state
    and time lag: its cursor, or (has_cursor false) the position its subscription rule
    starts it at on a partition it has not read yet (schema/functions/45_group_positions.sql)."""

    consumer_group: str
    queue_id: int
    queue: str
    partition_id: int
    partition: str
    committed: int
    last_offset: int
    log_start: int
    offset_lag: int
    lease_active: bool
    worker_id: str | None
    lease_expires_at: datetime | None
    retry_count: int
    total_consumed: int
    last_consumed_at: datetime | None
    oldest_unconsumed_at: datetime | None
    time_lag_seconds: float
    evicted: int  # messages skipped by maxWaitTimeSeconds
    has_cursor: bool


@dataclass(frozen=True, slots=True)
class Subscription:
    consumer_group: str
    queue: str
    mode: str | None  # None: no first-contact choice stored yet (version 82)
    subscription_from: datetime | None
    created_at: datetime
    conflation: bool  # last-value delivery (extensions §20.2)


@dataclass(frozen=True, slots=True)
class SeekRow:
    partition: str
    committed: int


@dataclass(frozen=True, slots=True)
class QueueInfo:
    id: int
    name: str
    namespace: str
    task: str
    created_at: datetime
    options: str  # JSON text


@dataclass(frozen=True, slots=True)
class QueuePageRow(QueueInfo):
    total: int  # queues matching the search, on every row


@dataclass(frozen=True, slots=True)
class PartitionPlace:
    """A partition with its queue and the bounds of its log: what the figures of a
    partition start with, as stored (`PartitionStatsRow`) and as derived
    (core/admin/resources.py `PartitionStats`)."""

    queue_id: int
    queue: str
    namespace: str
    task: str
    id: int
    name: str
    created_at: datetime
    last_offset: int
    log_start: int
    last_write_at: datetime | None


@dataclass(frozen=True, slots=True)
class PartitionStatsRow(PartitionPlace):
    total: int
    min_committed: int | None
    groups: int | None
    processing: int | None
    failing: int | None
    dead_letter: int
    oldest_at: datetime | None
    segments: int


@dataclass(frozen=True, slots=True)
class PartitionListRow:
    id: int
    name: str
    queue: str
    last_offset: int
    log_start: int
    last_write_at: datetime | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Overview:
    queues: int
    partitions: int
    appended: int
    retained: int
    segments: int
    cursors: int
    live_leases: int
    groups: int
    dead_letters: int
    db_now: datetime


_QUEUE_BY_NAME = Statement[None]("admin_queue_by_name")


async def queue_id(conn: Conn, *, tenant: str, name: str) -> int | None:
    value = await _QUEUE_BY_NAME.value(conn, name=name, tenant=tenant)
    return None if value is None else int(value)


_GROUP_CURSORS = Statement("admin_group_cursors", GroupCursor)


async def group_cursors(conn: Conn, *, tenant: str, group: str | None, queue: str | None,
                        lagging_over: float | None = None) -> list[GroupCursor]:
    return await _GROUP_CURSORS.rows(conn, group=group, queue=queue, lagging_over=lagging_over,
                                     tenant=tenant)


_SUBSCRIPTIONS = Statement("admin_subscriptions", Subscription)


async def subscriptions(conn: Conn, *, tenant: str, group: str | None) -> list[Subscription]:
    return await _SUBSCRIPTIONS.rows(conn, group=group, tenant=tenant)


_DELETE_GROUP_CURSORS = Statement[None]("admin_delete_group_cursors")


async def delete_group_cursors(conn: Conn, *, tenant: str, group: str,
                               queue: str | None) -> list[int]:
    """Delete a group's cursors; answers the queue id of each deleted cursor."""
    return [int(v) for v in await _DELETE_GROUP_CURSORS.values(conn, group=group, queue=queue,
                                                               tenant=tenant)]


_DELETE_GROUP_SUBSCRIPTIONS = Statement[None]("admin_delete_group_subscriptions")


async def delete_group_subscriptions(conn: Conn, *, tenant: str, group: str,
                                     queue: str | None) -> int:
    """Delete a group's stored subscriptions; answers how many."""
    return len(await _DELETE_GROUP_SUBSCRIPTIONS.values(conn, group=group, queue=queue,
                                                        tenant=tenant))


_SEEK = Statement("admin_seek", SeekRow)


async def seek(conn: Conn, *, queue_id: int, group: str, partition: str | None,
               timestamp: datetime | None) -> list[SeekRow]:
    return await _SEEK.rows(conn, queue_id=queue_id, group=group, partition=partition,
                            timestamp=timestamp)


_SET_SUBSCRIPTION = Statement[None]("admin_set_subscription_timestamp")


async def set_subscription_timestamp(conn: Conn, *, tenant: str, group: str,
                                     timestamp: datetime) -> int:
    return await _SET_SUBSCRIPTION.run(conn, group=group, timestamp=timestamp, tenant=tenant)


_QUEUE_PAGE = Statement("admin_queue_page", QueuePageRow)


async def queue_page(conn: Conn, *, tenant: str, search: str | None, limit: int, offset: int,
                     name: str | None = None, namespace: str | None = None,
                     task: str | None = None, created_from: datetime | None = None,
                     created_to: datetime | None = None) -> list[QueuePageRow]:
    return await _QUEUE_PAGE.rows(conn, search=search, limit=limit, offset=offset, name=name,
                                  namespace=namespace, task=task, created_from=created_from,
                                  created_to=created_to, tenant=tenant)


_PARTITION_STATS = Statement("admin_partition_stats", PartitionStatsRow)


async def partition_stats(conn: Conn, *, tenant: str,
                          queue_ids: Sequence[int] | None) -> list[PartitionStatsRow]:
    return await _PARTITION_STATS.rows(conn,
                                       queue_ids=None if queue_ids is None else list(queue_ids),
                                       tenant=tenant)


_QUEUE_ROW = Statement("admin_queue_row", QueueInfo)


async def queue_row(conn: Conn, *, tenant: str, name: str) -> QueueInfo | None:
    return await _QUEUE_ROW.one(conn, name=name, tenant=tenant)


_PARTITIONS_LIST = Statement("admin_partitions_list", PartitionListRow)


async def partitions_list(conn: Conn, *, tenant: str, queue: str | None, limit: int,
                          offset: int) -> list[PartitionListRow]:
    return await _PARTITIONS_LIST.rows(conn, queue=queue, limit=limit, offset=offset, tenant=tenant)


_OVERVIEW = Statement("admin_overview", Overview)


async def overview(conn: Conn, *, tenant: str | None) -> Overview:
    """The counts of one tenant's queues (None: of every queue)."""
    return await _OVERVIEW.single(conn, tenant=tenant)
