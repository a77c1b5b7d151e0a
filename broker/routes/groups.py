"""Consumer-group routes (§6.1): list, lagging, detail, delete, seek, subscription."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.groups import (
    DeleteGroupQuery,
    GroupDeleted,
    GroupPartitionOut,
    GroupPartitionPath,
    GroupPath,
    GroupQueueDeleted,
    GroupQueueOut,
    GroupQueuePath,
    GroupSummaryOut,
    LaggingOut,
    LaggingQuery,
    PartitionSeekAnswer,
    QueueSeekAnswer,
    SeekBody,
    SubscriptionAnswer,
    SubscriptionBody,
)
from broker.wire.http import json_response
from core.errors import BadRequest
from core.timefmt import iso, iso_or_none


async def list_groups(request: Request, tenant: str) -> Response:
    now = datetime.now(UTC)
    return json_response([GroupSummaryOut(
        name=s.name, topics=[s.queue], queueName=s.queue, members=len(s.members),
        partitionsWithLag=s.partitions_with_lag,
        # §6.1 lists totalLag as null; the offset backlog travels as offsetLag instead.
        totalLag=None, offsetLag=s.offset_lag, maxTimeLag=round(s.max_time_lag, 3),
        state=s.state(now), subscriptionMode=s.subscription_mode,
        subscriptionTimestamp=iso_or_none(s.subscription_timestamp),
        subscriptionCreatedAt=iso_or_none(s.subscription_created_at),
        conflation=s.conflation)
        for s in await broker_of(request).groups.summaries(tenant=tenant)])


async def lagging(request: Request, query: LaggingQuery, tenant: str) -> Response:
    out = []
    for c in await broker_of(request).groups.cursors(lagging_over=query.minLagSeconds,
                                                     tenant=tenant):
        out.append(LaggingOut(
            consumer_group=c.consumer_group, queue_name=c.queue, partition_name=c.partition,
            partition_id=str(c.partition_id),
            worker_id=c.worker_id if c.lease_active else None, offset_lag=c.offset_lag,
            time_lag_seconds=int(c.time_lag_seconds),
            lag_hours=round(c.time_lag_seconds / 3600, 2),
            oldest_unconsumed_at=iso_or_none(c.oldest_unconsumed_at),
            last_consumed_at=iso_or_none(c.last_consumed_at)))
    out.sort(key=lambda e: -e.time_lag_seconds)
    return json_response(out)


async def group_detail(request: Request, path: GroupPath, tenant: str) -> Response:
    by_queue: dict[str, GroupQueueOut] = {}
    for c in await broker_of(request).groups.cursors(group=path.group, tenant=tenant):
        by_queue.setdefault(c.queue, GroupQueueOut([])).partitions.append(GroupPartitionOut(
            partition=c.partition, partitionId=str(c.partition_id),
            workerId=c.worker_id if c.lease_active else None,
            lastConsumedAt=iso_or_none(c.last_consumed_at), totalConsumed=c.total_consumed,
            committedOffset=c.committed, offsetLag=c.offset_lag,
            timeLagSeconds=int(c.time_lag_seconds), leaseActive=c.lease_active,
            evicted=c.evicted, hasCursor=c.has_cursor))
    return json_response(by_queue)


async def delete_group(request: Request, path: GroupPath, query: DeleteGroupQuery,
                       tenant: str) -> Response:
    cursors, subs = await broker_of(request).groups.delete(
        path.group, queue=None, delete_metadata=query.deleteMetadata, tenant=tenant)
    return json_response(GroupDeleted(True, path.group, cursors, query.deleteMetadata, subs))


async def delete_group_for_queue(request: Request, path: GroupQueuePath,
                                 query: DeleteGroupQuery, tenant: str) -> Response:
    cursors, subs = await broker_of(request).groups.delete(
        path.group, queue=path.queue, delete_metadata=query.deleteMetadata, tenant=tenant)
    return json_response(GroupQueueDeleted(True, path.group, path.queue, cursors,
                                           query.deleteMetadata, subs))


def _seek_target(body: SeekBody, *, empty_means_end: bool) -> datetime | None:
    """None = to the end; else the timestamp. Neither given is a 400 (queue-wide seek)."""
    if body.toEnd:
        return None
    if body.timestamp is None or body.timestamp == "":
        if empty_means_end and body.toEnd is None:
            return None
        raise BadRequest('seek needs {"toEnd": true} or {"timestamp": "<ISO-8601>"}')
    return body.timestamp.instant


async def seek_queue(request: Request, path: GroupQueuePath, body: SeekBody,
                     tenant: str) -> Response:
    target = _seek_target(body, empty_means_end=False)
    result = await broker_of(request).groups.seek(path.group, path.queue, partition=None,
                                                  timestamp=target, tenant=tenant)
    return json_response(QueueSeekAnswer(True, path.group, path.queue, target is None,
                                         iso_or_none(target), len(result.cursors)))


async def seek_partition(request: Request, path: GroupPartitionPath, body: SeekBody,
                         tenant: str) -> Response:
    target = _seek_target(body, empty_means_end=True)
    result = await broker_of(request).groups.seek(path.group, path.queue,
                                                  partition=path.partition, timestamp=target,
                                                  tenant=tenant)
    return json_response(PartitionSeekAnswer(
        True, path.group, path.queue, path.partition, len(result.cursors) > 0,
        result.cursors[0][1] if result.cursors else None, target is None,
        iso_or_none(target)))


async def subscription(request: Request, path: GroupPath, body: SubscriptionBody,
                       tenant: str) -> Response:
    ts = body.subscriptionTimestamp.instant
    updated = await broker_of(request).groups.set_subscription_timestamp(path.group, ts,
                                                                         tenant=tenant)
    return json_response(SubscriptionAnswer(True, path.group, iso(ts), updated))
