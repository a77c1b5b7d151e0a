"""Message inspection (§5.3, §5.4): one message by address, and recent messages of a queue.

Progress is per (partition, group) cursor, never per message, so a message's status is
derived: below a group's cursor it is completed for that group, inside a live leased span it
is processing, a dead letter of that group makes it dead_letter, anything else is pending.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from core import options, segments
from core.admin.dlq import DlqRow, dead_letter
from core.engine import encryption
from core.ids import PartitionId
from core.storage import dead_letters as sql
from core.storage.database import Database
from core.storage.statements import Conn
from core.storage.writes import segments_at

Status = Literal["dead_letter", "completed", "processing", "pending"]
QUEUE_MODE = "__QUEUE_MODE__"
# How far back a lookup scans segments when the transactionId index no longer has the
# address (pruned): bounded so one request can never read a whole partition.
FALLBACK_SEGMENTS = 256
_SEGMENT_PAGE = 32


@dataclass(frozen=True, slots=True)
class GroupView:
    name: str
    status: Status
    committed: int
    lease_active: bool
    lease_expires_at: datetime | None
    worker_id: str | None
    retry_count: int


@dataclass(slots=True)
class MessageView:
    partition_id: int
    partition: str
    queue: str
    namespace: str
    task: str
    options: dict[str, Any]
    transaction_id: str
    offset: int | None
    message_id: uuid.UUID
    trace_id: uuid.UUID | None
    producer_sub: str | None
    payload: bytes
    created_at: datetime
    status: Status = "pending"
    error_message: str | None = None
    retry_count: int = 0
    lease_expires_at: datetime | None = None
    groups: list[GroupView] = field(default_factory=list)
    encrypted: bool = False  # the payload was stored encrypted (and decrypted for this)


def group_status(offset: int | None, cursor: sql.CursorState, dead_groups: set[str]) -> Status:
    if cursor.consumer_group in dead_groups:
        return "dead_letter"
    if offset is None:
        return "completed"  # only the dead-letter copy is left; the log moved past it
    if offset <= cursor.committed:
        return "completed"
    if cursor.lease_live and cursor.batch_end is not None and offset <= cursor.batch_end:
        return "processing"
    return "pending"


def overall_status(states: list[GroupView]) -> Status:
    """dead_letter beats processing beats pending; completed only when every group is done."""
    found = {s.status for s in states}
    order: tuple[Status, ...] = ("dead_letter", "processing", "pending")
    for status in order:
        if status in found:
            return status
    return "completed" if found else "pending"


@dataclass(frozen=True, slots=True)
class _Found:
    offset: int
    frame: segments.Frame
    created_at: datetime
    encrypted: bool


def _frames(part: sql.MessagePartition | sql.ListedPartition, blob: bytes
            ) -> list[segments.Frame]:
    return segments.unpack(encryption.opened(blob, part.queue, part.name))


async def _find_frame(conn: Conn, part: sql.MessagePartition,
                      transaction_id: str) -> _Found | None:
    partition_id = part.id
    offsets = await sql.message_offsets(conn, partition_id=partition_id,
                                        transaction_id=transaction_id,
                                        log_start=part.log_start)
    if offsets:
        for held in await segments_at(conn, partition_id=partition_id, offsets=offsets[:1]):
            frames = _frames(part, held.blob)
            return _Found(offsets[0], frames[offsets[0] - held.base_offset], held.created_at,
                          encryption.is_sealed(held.blob))
    # Index row pruned (or never written): scan the newest segments backwards, bounded.
    bound, scanned = part.last_offset + 1, 0
    while scanned < FALLBACK_SEGMENTS:
        rows = await sql.message_segments_newest(conn, partition_id=partition_id, below=bound,
                                                 limit=_SEGMENT_PAGE)
        if not rows:
            return None
        for seg in rows:
            for i, frame in enumerate(_frames(part, seg.blob)):
                if frame.transaction_id == transaction_id:
                    return _Found(seg.base_offset + i, frame, seg.created_at,
                                  encryption.is_sealed(seg.blob))
        scanned += len(rows)
        bound = rows[-1].base_offset
    return None


async def get_message(db: Database, partition_id: PartitionId, transaction_id: str, *,
                      tenant: str = "") -> MessageView | None:
    """A message by address with its derived status; None when neither the log nor the DLQ
    has it (or the partition is of another tenant's queue)."""
    async with db.session() as conn:
        part = await sql.message_partition(conn, tenant=tenant, partition_id=partition_id)
        if part is None:
            return None
        dead = [dead_letter(r) for r in await sql.dlq_rows_for_address(
            conn, tenant=tenant, partition_id=partition_id, transaction_id=transaction_id)]
        found = await _find_frame(conn, part, transaction_id)
        cursors = await sql.message_cursors(conn, partition_id=partition_id)
    common: dict[str, Any] = {
        "partition_id": part.id, "partition": part.name, "queue": part.queue,
        "namespace": part.namespace, "task": part.task,
        "options": options.decode(part.options).as_dict(), "transaction_id": transaction_id}
    if found is not None:
        frame = found.frame
        view = MessageView(**common, offset=found.offset, message_id=frame.message_id,
                           trace_id=frame.trace_id, producer_sub=frame.producer_sub,
                           payload=frame.payload, created_at=found.created_at,
                           encrypted=found.encrypted)
    elif dead:
        d: DlqRow = dead[0]
        view = MessageView(**common, offset=None, message_id=d.message_id,
                           trace_id=d.trace_id, producer_sub=d.producer_sub,
                           payload=d.payload, created_at=d.created_at,
                           encrypted=d.encrypted)
    else:
        return None
    dead_groups = {d.consumer_group for d in dead}
    for c in cursors:
        status = group_status(view.offset, c, dead_groups)
        view.groups.append(GroupView(
            c.consumer_group, status, c.committed, c.lease_live,
            c.lease_expires_at if c.lease_live else None,
            c.worker_id if c.lease_live else None, c.retry_count))
    view.status = overall_status(view.groups)
    if dead:
        view.status = "dead_letter"
        view.error_message = dead[0].error_message
        view.retry_count = dead[0].retry_count
    live = [g for g in view.groups if g.status == "processing"]
    if live:
        view.lease_expires_at = live[0].lease_expires_at
        view.retry_count = max(view.retry_count, live[0].retry_count)
    return view


@dataclass(frozen=True, slots=True)
class ListFilter:
    queue: str | None = None
    partition: str | None = None
    namespace: str | None = None
    task: str | None = None
    status: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None


@dataclass(frozen=True, slots=True)
class MessageListing:
    view: MessageView
    priority: int
    consumed_by: int


# A listing decodes segments; these bound the work one request may cause.
LIST_MAX_PARTITIONS = 100
LIST_MAX_PER_PARTITION = 1000


async def list_messages(db: Database, where: ListFilter, *, limit: int, offset: int,
                        tenant: str = "") -> tuple[list[MessageListing], int]:
    """Recent messages (newest first) of the matching partitions, with derived status.

    Answers (page, total). Without a status filter `total` counts every retained message of
    the matching partitions; with one it counts the matches among the messages examined."""
    want = min(limit + offset, LIST_MAX_PER_PARTITION)
    found: list[MessageListing] = []
    retained = 0
    async with db.session() as conn:
        parts = await sql.message_list_partitions(
            conn, tenant=tenant, queue=where.queue, partition=where.partition, namespace=where.namespace,
            task=where.task, limit=LIST_MAX_PARTITIONS)
        for part in parts:
            retained += part.last_offset - part.log_start + 1
            cursors = await sql.message_cursors(conn, partition_id=part.id)
            taken, bound = 0, part.last_offset + 1
            while taken < want:
                rows = await sql.message_segments_newest(conn, partition_id=part.id,
                                                         below=bound, limit=_SEGMENT_PAGE)
                if not rows:
                    break
                for seg in rows:
                    if where.created_to and seg.created_at > where.created_to:
                        continue
                    if where.created_from and seg.created_at < where.created_from:
                        taken = want  # older segments only get older
                        break
                    frames = _frames(part, seg.blob)
                    for i in range(len(frames) - 1, -1, -1):
                        at = seg.base_offset + i
                        if at < part.log_start or taken >= want:
                            continue
                        listed = _listed(part, cursors, at, frames[i], seg.created_at)
                        if where.status and listed.view.status != where.status:
                            continue
                        taken += 1
                        found.append(listed)
                    if taken >= want:
                        break
                bound = rows[-1].base_offset
    found.sort(key=lambda m: (m.view.created_at, m.view.offset or 0), reverse=True)
    total = len(found) if (where.status or where.created_from or where.created_to) else retained
    return found[offset:offset + limit], total


def _listed(part: sql.ListedPartition, cursors: list[sql.CursorState], at: int,
            f: segments.Frame, created_at: datetime) -> MessageListing:
    view = MessageView(
        partition_id=part.id, partition=part.name, queue=part.queue, namespace=part.namespace,
        task=part.task, options={}, transaction_id=f.transaction_id, offset=at,
        message_id=f.message_id, trace_id=f.trace_id, producer_sub=f.producer_sub,
        payload=f.payload, created_at=created_at)
    for c in cursors:
        view.groups.append(GroupView(
            c.consumer_group, group_status(at, c, set()), c.committed, c.lease_live,
            c.lease_expires_at, c.worker_id, c.retry_count))
    view.status = overall_status(view.groups)
    if view.status == "processing":
        view.lease_expires_at = next(
            g.lease_expires_at for g in view.groups if g.status == "processing")
    done = sum(1 for g in view.groups if g.status == "completed")
    return MessageListing(view, part.priority, done)


class Messages:
    """Message inspection (§5.3, §5.4) as the core service offers it."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get(self, partition_id: PartitionId, transaction_id: str, *,
                  tenant: str = "") -> MessageView | None:
        return await get_message(self._db, partition_id, transaction_id, tenant=tenant)

    async def list(self, where: ListFilter, *, limit: int, offset: int,
                   tenant: str = "") -> tuple[list[MessageListing], int]:
        return await list_messages(self._db, where, limit=limit, offset=offset,
                                   tenant=tenant)
