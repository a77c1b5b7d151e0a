"""Typed calls of the DLQ and message-inspection statements (schema/queries/dlq.sql)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.storage.reads import RangeRow
from core.storage.statements import Conn, Statement


@dataclass(slots=True)
class DeadLetterRow:
    """A DLQ row: the message itself (rows written before version 23) or the preserved copy
    of its segment (segment_base, segment_blob), from which the reader extracts it."""

    id: int
    partition_id: int
    queue: str
    partition: str
    consumer_group: str
    msg_offset: int
    transaction_id: str
    message_id: uuid.UUID | None
    trace_id: uuid.UUID | None
    producer_sub: str | None
    payload: bytes | None
    segment_base: int | None
    segment_blob: bytes | None
    error_message: str | None
    retry_count: int
    created_at: datetime
    failed_at: datetime


@dataclass(slots=True)
class DlqPageRow(DeadLetterRow):
    """A DLQ row of a page, with the number of all matching rows. A page past the end is one
    row with only `total` set."""

    total: int


@dataclass(frozen=True, slots=True)
class DeletedDeadLetter:
    id: int
    segment_base: int | None


@dataclass(frozen=True, slots=True)
class MessagePartition:
    id: int
    name: str
    last_offset: int
    log_start: int
    queue_id: int
    queue: str
    namespace: str
    task: str
    options: str  # JSON text


@dataclass(frozen=True, slots=True)
class CursorState:
    consumer_group: str
    committed: int
    batch_end: int | None
    worker_id: str | None
    lease_expires_at: datetime | None
    retry_count: int
    lease_live: bool


@dataclass(frozen=True, slots=True)
class ListedPartition:
    id: int
    name: str
    last_offset: int
    log_start: int
    queue: str
    namespace: str
    task: str
    priority: int


_PAGE = Statement("dlq_page", DlqPageRow)


async def dlq_page(conn: Conn, *, tenant: str, queue: str | None, group: str | None,
                   partition: str | None, failed_from: datetime | None,
                   failed_to: datetime | None, limit: int, offset: int,
                   max_bytes: int) -> tuple[list[DeadLetterRow], int]:
    """One page of matching rows, newest first, ended early where their stored bytes pass
    `max_bytes` (the first row kept), and the number of all matching rows."""
    rows = await _PAGE.rows(conn, queue=queue, group=group, partition=partition,
                            failed_from=failed_from, failed_to=failed_to, limit=limit,
                            offset=offset, max_bytes=max_bytes, tenant=tenant)
    total = rows[0].total if rows else 0
    return [r for r in rows if r.id is not None], total


# A row of the tenant's partition by its id or by its message address (the other None).
_ROWS = Statement("dlq_rows", DeadLetterRow)
_LOCK = Statement("dlq_lock", DeadLetterRow)  # the first of _ROWS, locked


_HOLD = Statement[None]("dlq_hold_placement")


async def dlq_lock_newest(conn: Conn, *, tenant: str, partition_id: int, transaction_id: str,
                          hold: bool) -> DeadLetterRow | None:
    """The newest row of an address, locked. `hold` (on Citus): the shard's placement is
    held first (`dlq_hold_placement`), so the row is read and locked on the copy the
    transaction then writes; without Citus that is a statement for nothing."""
    return await _lock(conn, tenant=tenant, partition_id=partition_id, dlq_id=None,
                       transaction_id=transaction_id, hold=hold)


async def _lock(conn: Conn, *, tenant: str, partition_id: int, dlq_id: int | None,
                transaction_id: str | None, hold: bool) -> DeadLetterRow | None:
    if hold:
        await _HOLD.value(conn, partition_id=partition_id)
    return await _LOCK.one(conn, partition_id=partition_id, tenant=tenant, dlq_id=dlq_id,
                           transaction_id=transaction_id)


async def dlq_rows_for_address(conn: Conn, *, tenant: str, partition_id: int,
                               transaction_id: str) -> list[DeadLetterRow]:
    return await _ROWS.rows(conn, partition_id=partition_id, tenant=tenant, dlq_id=None,
                            transaction_id=transaction_id)


_DELETE = Statement("dlq_delete", DeletedDeadLetter)


async def dlq_delete(conn: Conn, *, partition_id: int, row_id: int | None,
                     transaction_id: str | None) -> list[DeletedDeadLetter]:
    return await _DELETE.rows(conn, partition_id=partition_id, row_id=row_id,
                              transaction_id=transaction_id)


_LOCK_COPIES = Statement[None]("dlq_lock_copies")


async def dlq_lock_copies(conn: Conn, *, partition_id: int, bases: Sequence[int]) -> None:
    await _LOCK_COPIES.run(conn, partition_id=partition_id, bases=list(bases))


_DROP_COPIES = Statement[None]("dlq_drop_copies")


async def dlq_drop_copies(conn: Conn, *, partition_id: int, bases: Sequence[int]) -> None:
    await _DROP_COPIES.run(conn, partition_id=partition_id, bases=list(bases))


_MESSAGE_PARTITION = Statement("message_partition", MessagePartition)


async def message_partition(conn: Conn, *, tenant: str,
                            partition_id: int) -> MessagePartition | None:
    """A partition of the tenant's queues (None: there is none of that id)."""
    return await _MESSAGE_PARTITION.one(conn, partition_id=partition_id, tenant=tenant)


_MESSAGE_OFFSETS = Statement[None]("message_offsets")


async def message_offsets(conn: Conn, *, partition_id: int, transaction_id: str,
                          log_start: int) -> list[int]:
    return [int(v) for v in await _MESSAGE_OFFSETS.values(conn, partition_id=partition_id,
                                                          transaction_id=transaction_id,
                                                          log_start=log_start)]


_SEGMENTS_NEWEST = Statement("message_segments_newest", RangeRow)


async def message_segments_newest(conn: Conn, *, partition_id: int, below: int, limit: int,
                                  max_bytes: int) -> list[RangeRow]:
    """Up to `limit` segments below `below`, newest first, ended early where their stored
    bytes pass `max_bytes` (the first kept)."""
    return await _SEGMENTS_NEWEST.rows(conn, partition_id=partition_id, below=below,
                                       limit=limit, max_bytes=max_bytes)


_CURSORS = Statement("message_cursors", CursorState)


async def message_cursors(conn: Conn, *, partition_id: int) -> list[CursorState]:
    return await _CURSORS.rows(conn, partition_id=partition_id)


_LIST_PARTITIONS = Statement("message_list_partitions", ListedPartition)


async def message_list_partitions(conn: Conn, *, tenant: str, queue: str | None,
                                  partition: str | None, namespace: str | None,
                                  task: str | None, limit: int) -> list[ListedPartition]:
    return await _LIST_PARTITIONS.rows(conn, queue=queue, partition=partition, namespace=namespace,
                                       task=task, limit=limit, tenant=tenant)


@dataclass(frozen=True, slots=True)
class PurgeCandidate:
    partition_id: int
    id: int


@dataclass(frozen=True, slots=True)
class PurgedDeadLetter:
    partition_id: int
    segment_base: int | None


_PARTITION_OF = Statement[None]("dlq_partition_of")


async def dlq_lock_by_id(conn: Conn, *, tenant: str, dlq_id: int,
                         hold: bool) -> DeadLetterRow | None:
    """The row of that id, locked (None: there is none, or it is another tenant's). The
    partition is read first, so that the lock names it (one shard on Citus), and with
    `hold` its shard's placement is held before the lock (`dlq_lock_newest`); the lock reads
    the row again, on the copy held."""
    partition_id = await _PARTITION_OF.value(conn, dlq_id=dlq_id)
    if partition_id is None:
        return None
    return await _lock(conn, tenant=tenant, partition_id=partition_id, dlq_id=dlq_id,
                       transaction_id=None, hold=hold)


_PURGE_BATCH = Statement("dlq_purge_batch", PurgeCandidate)


async def dlq_purge_batch(conn: Conn, *, tenant: str, queue: str, group: str | None,
                          batch: int) -> list[PurgeCandidate]:
    return await _PURGE_BATCH.rows(conn, queue=queue, group=group, batch=batch, tenant=tenant)


_PURGE_ROWS = Statement("dlq_purge_rows", PurgedDeadLetter)


async def dlq_purge_rows(conn: Conn, *, partition_id: int,
                         ids: Sequence[int]) -> list[PurgedDeadLetter]:
    return await _PURGE_ROWS.rows(conn, partition_id=partition_id, ids=list(ids))
