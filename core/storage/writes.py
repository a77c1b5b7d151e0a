"""Typed calls of the write-path and queue-management statements (schema/queries/write.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.storage import durability
from core.storage.joined import joined
from core.storage.statements import Conn, Routed, Statement


@dataclass(slots=True)
class AppendRow:
    """One partition of an append: written (base_offset set), or refused for duplicates
    or for segments sealed (or not) against the queue's encryptionEnabled."""

    queue_id: int
    partition_id: int
    base_offset: int | None
    created_at: datetime | None
    dup_positions: list[int] | None  # 1-based frame positions within the partition
    dup_offsets: list[int | None] | None  # stored offset each repeats; None: an earlier frame
    encrypted: bool  # the queue's encryptionEnabled, as the append saw it


@dataclass(slots=True)
class SegmentRow:
    base_offset: int
    created_at: datetime
    blob: bytes


@dataclass(frozen=True, slots=True)
class QueueRow:
    id: int
    namespace: str
    task: str
    options: str  # JSON text


@dataclass(frozen=True, slots=True)
class AppendSegment:
    """One segment to append: its blob and the transactionId of each of its frames."""

    blob: bytes
    transaction_ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class AppendTarget:
    """A partition to append to, by name (and its id, once known), with the segments it
    gets (in order)."""

    queue: str
    partition: str
    namespace: str
    task: str
    segments: Sequence[AppendSegment]
    repeats: bool  # whether a transactionId occurs twice among its frames
    encrypted: bool = False  # whether its segments are sealed (core/engine/encryption.py)
    partition_id: int = 0  # the id remembered for it; 0: none (looked up by name)
    tenant: str = ""  # the queue's tenant (core/tenancy)


@dataclass(frozen=True, slots=True)
class PartitionIds:
    queue_id: int
    partition_id: int


@dataclass(frozen=True, slots=True)
class PartitionLookup:
    queue_id: int
    partition_id: int | None  # None: the queue exists, the partition does not


_PARTITION_IDS = Statement("partition_ids", PartitionIds)


async def partition_ids(conn: Conn, *, tenants: Sequence[str], queues: Sequence[str],
                        partitions: Sequence[str], namespaces: Sequence[str],
                        tasks: Sequence[str], default_options: str) -> list[PartitionIds]:
    """The ids of partitions by name (each of a queue of its tenant), created with their
    queue when missing; one row per name, in order (callers give names in (queue,
    partition) order)."""
    return await _PARTITION_IDS.rows(conn, tenants=list(tenants), queues=list(queues),
                                     partitions=list(partitions), namespaces=list(namespaces),
                                     tasks=list(tasks), default_options=default_options)


_PARTITION_LOOKUP = Statement("partition_lookup", PartitionLookup)


async def partition_lookup(conn: Conn, *, tenant: str, queue: str,
                           partition: str) -> PartitionLookup | None:
    """A partition's id by name, creating nothing; None when the tenant has no such
    queue."""
    return await _PARTITION_LOOKUP.one(conn, tenant=tenant, queue=queue, partition=partition)


_APPEND = Routed("append_partitions", AppendRow)
_APPEND_JOINED = Routed("append_partitions_joined", AppendRow)


async def append(conn: Conn, *, route: int | None, targets: Sequence[AppendTarget],
                 default_options: str) -> list[AppendRow]:
    """Append to several partitions in one statement (schema/functions/20_append.sql); one
    row per target, in order. Callers order targets by (queue, partition) so that concurrent
    appends lock partition rows in one order; `route`: the shard all of them are on
    (core/storage/shards.py), None on one PostgreSQL. The transactionIds go as one text
    (`append_partitions_joined`) unless one holds the separator."""
    arguments = append_arguments(targets, default_options)
    txids = joined(arguments["transaction_ids"])
    if txids is not None:
        arguments["transaction_ids"] = txids
    statement = (_APPEND if txids is None else _APPEND_JOINED).on(route)
    async with durability.replicated(conn):  # autocommitted: the commit is this statement's
        return await statement.rows(
            conn, route=route, tenants=[t.tenant for t in targets],
            partition_ids=[t.partition_id for t in targets], **arguments)


def append_arguments(targets: Sequence[AppendTarget], default_options: str) -> dict[str, Any]:
    """`append_partitions`' parameters for these targets but the route, the tenants and the
    ids remembered: a stream cycle passes them on, with the tenant of its query."""
    blobs: list[bytes] = []
    frames: list[int] = []
    txids: list[str] = []
    for target in targets:
        for segment in target.segments:
            blobs.append(segment.blob)
            frames.append(len(segment.transaction_ids))
            txids.extend(segment.transaction_ids)
    return {"queues": [t.queue for t in targets], "partitions": [t.partition for t in targets],
            "namespaces": [t.namespace for t in targets], "tasks": [t.task for t in targets],
            "default_options": default_options, "segments": [len(t.segments) for t in targets],
            "frames": frames, "blobs": blobs, "transaction_ids": txids,
            "repeats": [t.repeats for t in targets], "encrypted": [t.encrypted for t in targets]}


_SEGMENTS_AT = Statement("segments_at", SegmentRow)


async def segments_at(conn: Conn, *, partition_id: int,
                      offsets: Sequence[int]) -> list[SegmentRow]:
    """The segments holding these offsets, each once, in offset order."""
    return await _SEGMENTS_AT.rows(conn, partition_id=partition_id, offsets=list(offsets))


_LOCK_QUEUE = Statement("lock_queue", QueueRow)


async def lock_queue(conn: Conn, *, tenant: str, name: str) -> QueueRow | None:
    return await _LOCK_QUEUE.one(conn, tenant=tenant, name=name)


_INSERT_QUEUE = Statement[None]("insert_queue")


async def insert_queue(conn: Conn, *, tenant: str, name: str, namespace: str, task: str,
                       options: str) -> None:
    await _INSERT_QUEUE.run(conn, tenant=tenant, name=name, namespace=namespace, task=task,
                            options=options)


_UPDATE_QUEUE = Statement[None]("update_queue")


async def update_queue(conn: Conn, *, queue_id: int, namespace: str, task: str,
                       options: str) -> None:
    await _UPDATE_QUEUE.run(conn, queue_id=queue_id, namespace=namespace, task=task,
                            options=options)


_DELETE_QUEUE_ROW = Statement[None]("delete_queue_row")


async def delete_queue_row(conn: Conn, *, tenant: str, name: str) -> int | None:
    """The deleted queue's id; None when there was none."""
    value = await _DELETE_QUEUE_ROW.value(conn, tenant=tenant, name=name)
    return None if value is None else int(value)


_DELETE_QUEUE_DIRECTORY = Statement[None]("delete_queue_directory")


async def delete_queue_directory(conn: Conn, *, queue_id: int) -> None:
    await _DELETE_QUEUE_DIRECTORY.run(conn, queue_id=queue_id)


_DELETE_QUEUE_PARTITIONS = Statement[None]("delete_queue_partitions")


async def delete_queue_partitions(conn: Conn, *, queue_id: int) -> list[int]:
    ids = await _DELETE_QUEUE_PARTITIONS.values(conn, queue_id=queue_id)
    return [int(v) for v in ids]


_DELETE_PARTITION_DATA = Statement[None]("delete_partition_data")


async def delete_partition_data(conn: Conn, *, partition_ids: Sequence[int]) -> None:
    await _DELETE_PARTITION_DATA.run(conn, partition_ids=list(partition_ids))


_DELETE_QUEUE_SUBSCRIPTIONS = Statement[None]("delete_queue_subscriptions")


async def delete_queue_subscriptions(conn: Conn, *, queue_id: int) -> None:
    await _DELETE_QUEUE_SUBSCRIPTIONS.run(conn, queue_id=queue_id)
