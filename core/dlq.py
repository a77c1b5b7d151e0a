"""The dead-letter store seen from the admin side: listing, replay and deletion (§5).

Rows are written by the ack path. A replay appends the stored payload copy as a new message
(fresh transactionId) to the same partition and deletes the row, in one transaction, so a
crash in between leaves either the dead letter or the replayed message, never both or none.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from core.db import Database, storage_errors
from core.ids import PartitionId, uuid7
from core.queries import QUERIES
from core.wakeup import notify_queues
from core.writes import NewMessage, PartitionGone, append_on


@dataclass(frozen=True, slots=True)
class DlqFilter:
    queue: str | None = None
    consumer_group: str | None = None
    partition: str | None = None
    failed_from: datetime | None = None
    failed_to: datetime | None = None


@dataclass(frozen=True, slots=True)
class DlqRow:
    id: int
    partition_id: int
    queue: str
    partition: str
    consumer_group: str
    offset: int
    transaction_id: str
    message_id: uuid.UUID
    trace_id: uuid.UUID | None
    producer_sub: str | None
    payload: bytes  # raw JSON bytes as stored
    error_message: str | None
    retry_count: int
    created_at: datetime
    failed_at: datetime


@dataclass(frozen=True, slots=True)
class Replayed:
    """A DLQ row replayed as a new message."""

    dlq_id: int
    queue: str
    partition: str
    consumer_group: str
    original_transaction_id: str
    transaction_id: str
    message_id: uuid.UUID
    status: str  # queued | duplicate
    offset: int | None


async def list_rows(db: Database, where: DlqFilter, *, limit: int,
                    offset: int) -> tuple[list[DlqRow], int]:
    """One page of matching rows, newest first, and the number of all matching rows."""
    records = await db.fetch("dlq_page", where.queue, where.consumer_group, where.partition,
                             where.failed_from, where.failed_to, limit, offset)
    total = int(records[0]["total"]) if records else 0
    rows = [_row(r) for r in records if r["id"] is not None]
    return rows, total


def _row(r: asyncpg.Record) -> DlqRow:
    return DlqRow(
        id=r["id"], partition_id=r["partition_id"], queue=r["queue"], partition=r["partition"],
        consumer_group=r["consumer_group"], offset=r["msg_offset"],
        transaction_id=r["transaction_id"], message_id=r["message_id"],
        trace_id=r["trace_id"], producer_sub=r["producer_sub"], payload=bytes(r["payload"]),
        error_message=r["error_message"], retry_count=r["retry_count"],
        created_at=r["created_at"], failed_at=r["failed_at"])


async def replay(db: Database, partition_id: PartitionId, transaction_id: str) -> Replayed | None:
    """Re-push the newest dead letter of an address under a fresh transactionId and delete
    that row, atomically; None when the address has no dead letter."""
    async with db.connection() as conn:
        try:
            with storage_errors():
                async with conn.transaction():
                    row = await conn.fetchrow(QUERIES["dlq_lock_newest"], partition_id,
                                              transaction_id)
                    if row is None:
                        return None
                    message_id = uuid7()
                    fresh_txid = str(uuid7())
                    [verdict] = await append_on(conn, partition_id, [NewMessage(
                        message_id, fresh_txid, bytes(row["payload"]), row["trace_id"],
                        row["producer_sub"])])
                    await conn.execute(QUERIES["dlq_delete_row"], row["id"])
        except PartitionGone:
            # Its queue was deleted meanwhile, and with it every dead letter of the partition.
            return None
        with storage_errors():
            await notify_queues(conn, [row["queue_id"]])
    return Replayed(
        dlq_id=row["id"], queue=row["queue"], partition=row["partition"],
        consumer_group=row["consumer_group"], original_transaction_id=transaction_id,
        transaction_id=fresh_txid, message_id=verdict.message_id, status=verdict.status,
        offset=verdict.offset)


async def delete_address(db: Database, partition_id: PartitionId, transaction_id: str) -> int:
    """Delete every dead letter of an address (stored log messages are immutable); answers
    how many rows went."""
    return len(await db.fetch("dlq_delete_address", partition_id, transaction_id))
