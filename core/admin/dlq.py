"""The dead-letter store seen from the admin side: listing, replay and deletion (§5).

Rows are written by the ack (`queen.ack`), which records the preserved copy of the
message's segment rather than the message; `dead_letter` extracts it here. A replay appends
the message as a new one (fresh transactionId) to the same partition and deletes the row,
in one transaction, so a crash in between leaves either the dead letter or the replayed
message, never both or none.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core import segments
from core.engine import encryption
from core.engine.directory import PartitionName
from core.engine.wakeup import Publish, Wake
from core.engine.writes import NewMessage, append
from core.ids import NIL_UUID, PartitionId, uuid7
from core.pages import OffsetPage, offset_page, within_bytes
from core.storage import dead_letters as sql
from core.storage.database import Database
from core.storage.statements import Conn
from core.tenancy.service import Tenants

_UNKNOWN_ID = uuid.UUID(NIL_UUID)
PURGE_BATCH = 5000  # dead letters deleted per transaction by a bulk purge


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
    encrypted: bool = False  # the payload was stored encrypted (and decrypted for this)


@dataclass(frozen=True, slots=True)
class ReplayedLetter:
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


def dead_letter(row: sql.DeadLetterRow) -> DlqRow:
    """A DLQ row with its message: stored in the row (written before version 23), or
    extracted from the preserved copy of its segment."""
    message_id, trace_id, producer_sub = row.message_id, row.trace_id, row.producer_sub
    payload = row.payload
    encrypted = False
    if payload is None:
        frame = _frame(row)
        if frame is None:  # the copy is gone (cannot happen while the row exists)
            message_id, payload = _UNKNOWN_ID, b"null"
        else:
            message_id, trace_id, producer_sub = frame.message_id, frame.trace_id, \
                frame.producer_sub
            payload = frame.payload
            encrypted = encryption.is_sealed(row.segment_blob or b"")
    return DlqRow(
        id=row.id, partition_id=row.partition_id, queue=row.queue, partition=row.partition,
        consumer_group=row.consumer_group, offset=row.msg_offset,
        transaction_id=row.transaction_id, message_id=message_id or _UNKNOWN_ID,
        trace_id=trace_id, producer_sub=producer_sub, payload=bytes(payload),
        error_message=row.error_message, retry_count=row.retry_count,
        created_at=row.created_at, failed_at=row.failed_at, encrypted=encrypted)


def _frame(row: sql.DeadLetterRow) -> segments.Frame | None:
    if row.segment_blob is None or row.segment_base is None:
        return None
    frames = segments.unpack(encryption.opened(row.segment_blob, row.queue, row.partition))
    index = row.msg_offset - row.segment_base
    return frames[index] if 0 <= index < len(frames) else None


class DeadLetters:
    """Listing, replay and deletion of dead letters; a replay wakes the partition's pops.
    Every call is of one tenant's queues: another tenant's dead letters, partitions and
    row ids are not found."""

    def __init__(self, db: Database, publish: Publish, tenants: Tenants, *,
                 list_max_bytes: int) -> None:
        self._db = db
        self._publish = publish
        self._tenants = tenants  # quotas: a replay elsewhere may create a queue
        self._list_max_bytes = list_max_bytes  # a page's payloads (QUEEN_LIST_MAX_BYTES)

    def _hold(self) -> bool:
        """Whether a replay holds the placement of the letter's shard before it reads the
        letter (core/storage/dead_letters.py): on Citus, as the shard map says now; one
        PostgreSQL has no placement to hold."""
        return self._db.shards.distributed

    async def list_rows(self, where: DlqFilter, *, limit: int, offset: int,
                        tenant: str = "") -> OffsetPage[DlqRow]:
        """One page of matching rows, newest first, with the number of all matching rows.

        The page ends early where its bytes pass the budget, its first row kept: the
        statement counts the bytes stored (the rows left out are never read), and here the
        payloads as they go out (a compressed segment copy may hold more than it stores)."""
        async with self._db.session() as conn:
            rows, total = await sql.dlq_page(
                conn, tenant=tenant, queue=where.queue, group=where.consumer_group,
                partition=where.partition, failed_from=where.failed_from,
                failed_to=where.failed_to, limit=limit, offset=offset,
                max_bytes=self._list_max_bytes)
        page = within_bytes((dead_letter(r) for r in rows), lambda row: len(row.payload),
                            self._list_max_bytes)
        return offset_page(page, total, offset, min(limit, total - offset))

    async def rows_for_address(self, partition_id: PartitionId, transaction_id: str, *,
                               tenant: str = "") -> list[DlqRow]:
        """The dead letters of a message address, newest first."""
        async with self._db.session() as conn:
            rows = await sql.dlq_rows_for_address(conn, tenant=tenant,
                                                  partition_id=partition_id,
                                                  transaction_id=transaction_id)
        return [dead_letter(r) for r in rows]

    async def replay(self, partition_id: PartitionId, transaction_id: str, *,
                     tenant: str = "") -> ReplayedLetter | None:
        """Re-push the newest dead letter of an address under a fresh transactionId and
        delete that row, atomically; None when the address has no dead letter."""
        async with self._db.transaction() as conn:
            row = await sql.dlq_lock_newest(conn, tenant=tenant, partition_id=partition_id,
                                            transaction_id=transaction_id, hold=self._hold())
            if row is None:
                return None
            replayed, wake = await _replay(conn, dead_letter(row), None, None, tenant)
        await self._publish(wake)
        return replayed

    async def replay_id(self, dlq_id: int, *, queue: str | None = None,
                        partition: str | None = None, tenant: str = "") -> ReplayedLetter | None:
        """Replay one dead letter by its row id (§11), to its own queue and partition or to
        the `queue` / `partition` given instead (a queue of the same tenant, created like a
        push creates it); None when no such row exists."""
        if queue is not None:
            await self._tenants.admit_names(tenant, [(queue, partition)])
        async with self._db.transaction() as conn:
            row = await sql.dlq_lock_by_id(conn, tenant=tenant, dlq_id=dlq_id,
                                           hold=self._hold())
            if row is None:
                return None
            replayed, wake = await _replay(conn, dead_letter(row), queue, partition, tenant)
        await self._publish(wake)
        return replayed

    async def purge(self, queue: str, group: str | None, *, tenant: str = "") -> int:
        """Delete every dead letter of a queue (or of one group on it), in transactions of
        PURGE_BATCH rows so a large purge holds no long locks; answers rows deleted."""
        deleted = 0
        while True:
            async with self._db.transaction() as conn:
                batch = await sql.dlq_purge_batch(conn, tenant=tenant, queue=queue,
                                                  group=group, batch=PURGE_BATCH)
                ids: dict[int, list[int]] = {}
                for c in batch:
                    ids.setdefault(c.partition_id, []).append(c.id)
                # One statement per partition (one shard on Citus), in partition order.
                gone = [g for pid, row_ids in sorted(ids.items())
                        for g in await sql.dlq_purge_rows(conn, partition_id=pid, ids=row_ids)]
                by_partition: dict[int, set[int]] = {}
                for g in gone:
                    if g.segment_base is not None:
                        by_partition.setdefault(g.partition_id, set()).add(g.segment_base)
                for pid, bases in sorted(by_partition.items()):
                    await _drop_unreferenced_copies(conn, pid, sorted(bases))
            deleted += len(gone)
            if len(batch) < PURGE_BATCH:
                return deleted

    async def delete_address(self, partition_id: PartitionId, transaction_id: str, *,
                             tenant: str = "") -> int:
        """Delete every dead letter of an address (stored log messages are immutable);
        answers how many rows went (0 for a partition of another tenant's queue)."""
        async with self._db.transaction() as conn:
            if await sql.message_partition(conn, tenant=tenant,
                                           partition_id=partition_id) is None:
                return 0
            return await _delete(conn, partition_id, row_id=None,
                                 transaction_id=transaction_id)


async def _replay(conn: Conn, letter: DlqRow, queue: str | None, partition: str | None,
                  tenant: str) -> tuple[ReplayedLetter, list[Wake]]:
    """Append a locked dead letter as a new message under a fresh transactionId (to its own
    partition unless another is named, of the tenant's queues) and delete its row, in the
    caller's transaction."""
    target = PartitionName(letter.queue if queue is None else queue,
                           letter.partition if partition is None else partition, tenant)
    fresh_txid = str(uuid7())
    [appended] = await append(conn, [(target, [
        NewMessage(uuid7(), fresh_txid, letter.payload, letter.trace_id,
                   letter.producer_sub)])])
    await _delete(conn, letter.partition_id, row_id=letter.id, transaction_id=None)
    [verdict] = appended.verdicts
    wake: list[Wake] = ([(appended.queue_id, appended.partition_id)]
                        if verdict.status == "queued" else [])
    return ReplayedLetter(
        dlq_id=letter.id, queue=target.queue, partition=target.partition,
        consumer_group=letter.consumer_group,
        original_transaction_id=letter.transaction_id, transaction_id=fresh_txid,
        message_id=verdict.message_id, status=verdict.status, offset=verdict.offset), wake


async def _delete(conn: Conn, partition_id: int, *, row_id: int | None,
                  transaction_id: str | None) -> int:
    """Delete dead letters and the segment copies nobody refers to any more (in the
    caller's transaction: the lock taken here orders us after an ack adding a reference)."""
    gone = await sql.dlq_delete(conn, partition_id=partition_id, row_id=row_id,
                                transaction_id=transaction_id)
    bases: Sequence[int] = sorted({g.segment_base for g in gone if g.segment_base is not None})
    await _drop_unreferenced_copies(conn, partition_id, bases)
    return len(gone)


async def _drop_unreferenced_copies(conn: Conn, partition_id: int,
                                    bases: Sequence[int]) -> None:
    if bases:
        await sql.dlq_lock_copies(conn, partition_id=partition_id, bases=bases)
        await sql.dlq_drop_copies(conn, partition_id=partition_id, bases=bases)
