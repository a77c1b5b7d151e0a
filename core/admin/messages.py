"""Message inspection (§5.3, §5.4): one message by address, and recent messages of a queue.

Progress is per (partition, group) cursor, never per message, so a message's status is
derived: below a group's cursor it is completed for that group, inside a live leased span it
is processing, a dead letter of that group makes it dead_letter, anything else is pending.
"""

from __future__ import annotations

import heapq
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from core import options, segments
from core.admin.dlq import DlqRow, dead_letter
from core.engine import encryption
from core.ids import PartitionId
from core.pages import OffsetPage, offset_page, within_bytes
from core.storage import dead_letters as sql
from core.storage.database import Database
from core.storage.reads import RangeRow
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


async def _find_frame(conn: Conn, part: sql.MessagePartition, transaction_id: str,
                      segment_bytes: int) -> _Found | None:
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
                                                 limit=_SEGMENT_PAGE, max_bytes=segment_bytes)
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
                      segment_bytes: int, tenant: str = "") -> MessageView | None:
    """A message by address with its derived status; None when neither the log nor the DLQ
    has it (or the partition is of another tenant's queue)."""
    async with db.session() as conn:
        part = await sql.message_partition(conn, tenant=tenant, partition_id=partition_id)
        if part is None:
            return None
        dead = [dead_letter(r) for r in await sql.dlq_rows_for_address(
            conn, tenant=tenant, partition_id=partition_id, transaction_id=transaction_id)]
        found = await _find_frame(conn, part, transaction_id, segment_bytes)
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
    # The listing collects without payloads (a walk may examine 100 000 messages of up to
    # 16 MiB) and reads those of the page it answers: the payload's size, and the segment
    # that holds it with that segment's stored size.
    size: int = 0
    segment_base: int = 0
    segment_size: int = 0


# A listing decodes segments; these bound the work one request may cause.
LIST_MAX_PARTITIONS = 100
LIST_MAX_PER_PARTITION = 1000


def _newest(m: MessageListing) -> tuple[datetime, int]:
    return m.view.created_at, m.view.offset or 0


async def list_messages(db: Database, where: ListFilter, *, limit: int, offset: int,
                        segment_bytes: int, payload_bytes: int | None,
                        tenant: str = "") -> OffsetPage[MessageListing]:
    """Recent messages (newest first) of the matching partitions, with derived status.
    Without a status or time filter `total` counts every retained message of the matching
    partitions; with one, the matches among the messages examined.

    The walk reads segments a byte-bounded page at a time (`segment_bytes`) and holds no
    payload, only the newest offset + limit messages examined so far. With `payload_bytes`
    the page ends early where its payloads pass it (its first row kept whatever its size)
    and only the payloads of the rows it keeps are read; with None it answers none."""
    want = min(limit + offset, LIST_MAX_PER_PARTITION)
    keep = offset + limit
    found: list[MessageListing] = []
    matched = retained = 0
    async with db.session() as conn:
        parts = await sql.message_list_partitions(
            conn, tenant=tenant, queue=where.queue, partition=where.partition, namespace=where.namespace,
            task=where.task, limit=LIST_MAX_PARTITIONS)
        for part in parts:
            retained += part.last_offset - part.log_start + 1
            cursors = await sql.message_cursors(conn, partition_id=part.id)
            mine: list[MessageListing] = []
            taken, bound = 0, part.last_offset + 1
            while taken < want:
                rows = await sql.message_segments_newest(conn, partition_id=part.id,
                                                         below=bound, limit=_SEGMENT_PAGE,
                                                         max_bytes=segment_bytes)
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
                        listed = _listed(part, cursors, at, frames[i], seg)
                        if where.status and listed.view.status != where.status:
                            continue
                        taken += 1
                        mine.append(listed)
                    del frames  # this segment's payloads: not kept
                    if taken >= want:
                        break
                bound = rows[-1].base_offset
            matched += len(mine)
            # Only the newest `keep` of all can be on this page or before it. nlargest is
            # sorted(..., reverse=True)[:keep], ties in the order examined, as before.
            found = heapq.nlargest(keep, [*found, *mine], key=_newest)
        page = found[offset:]
        if payload_bytes is None:
            kept = answered = page
        else:
            kept = within_bytes(page, lambda m: m.size, payload_bytes)
            answered = await _with_payloads(conn, kept, segment_bytes)
    total = matched if (where.status or where.created_from or where.created_to) else retained
    # (next_offset counts the rows kept: one whose segment went since is answered by none.)
    cut = offset_page(kept, total, offset, len(page))
    return OffsetPage(answered, total, cut.truncated, cut.next_offset)


async def _with_payloads(conn: Conn, rows: list[MessageListing],
                         segment_bytes: int) -> list[MessageListing]:
    """The rows with their payloads, read from their segments a batch at a time (a batch's
    stored bytes within `segment_bytes`, at least one segment each). A row whose segment
    retention removed since the walk read it is left out (it is no longer stored)."""
    holders: dict[tuple[int, int], list[MessageListing]] = {}
    for m in rows:
        holders.setdefault((m.view.partition_id, m.segment_base), []).append(m)
    filled: set[int] = set()
    batch: list[tuple[int, int]] = []
    held = 0
    for key in [*holders, None]:
        size = 0 if key is None else holders[key][0].segment_size
        if batch and (key is None or key[0] != batch[0][0] or held + size > segment_bytes):
            first = holders[batch[0]][0].view
            for seg in await segments_at(conn, partition_id=first.partition_id,
                                         offsets=[base for _, base in batch]):
                frames = segments.unpack(
                    encryption.opened(seg.blob, first.queue, first.partition))
                for m in holders.get((first.partition_id, seg.base_offset), []):
                    assert m.view.offset is not None  # a listed message is in the log
                    m.view.payload = frames[m.view.offset - seg.base_offset].payload
                    filled.add(id(m))
            batch, held = [], 0
        if key is not None:
            batch.append(key)
            held += size
    return [m for m in rows if id(m) in filled]


def _listed(part: sql.ListedPartition, cursors: list[sql.CursorState], at: int,
            f: segments.Frame, seg: RangeRow) -> MessageListing:
    view = MessageView(
        partition_id=part.id, partition=part.name, queue=part.queue, namespace=part.namespace,
        task=part.task, options={}, transaction_id=f.transaction_id, offset=at,
        message_id=f.message_id, trace_id=f.trace_id, producer_sub=f.producer_sub,
        payload=b"", created_at=seg.created_at)
    for c in cursors:
        view.groups.append(GroupView(
            c.consumer_group, group_status(at, c, set()), c.committed, c.lease_live,
            c.lease_expires_at, c.worker_id, c.retry_count))
    view.status = overall_status(view.groups)
    if view.status == "processing":
        view.lease_expires_at = next(
            g.lease_expires_at for g in view.groups if g.status == "processing")
    done = sum(1 for g in view.groups if g.status == "completed")
    return MessageListing(view, part.priority, done, len(f.payload), seg.base_offset,
                          len(seg.blob))


class Messages:
    """Message inspection (§5.3, §5.4) as the core service offers it."""

    def __init__(self, db: Database, *, list_max_bytes: int) -> None:
        self._db = db
        # The stored bytes a page of segments read at once may hold (QUEEN_LIST_MAX_BYTES).
        self._segment_bytes = list_max_bytes

    async def get(self, partition_id: PartitionId, transaction_id: str, *,
                  tenant: str = "") -> MessageView | None:
        return await get_message(self._db, partition_id, transaction_id, tenant=tenant,
                                 segment_bytes=self._segment_bytes)

    async def list(self, where: ListFilter, *, limit: int, offset: int,
                   payload_bytes: int | None, tenant: str = "") -> OffsetPage[MessageListing]:
        """A page of recent messages; with `payload_bytes` their payloads, the page ended
        early where they pass it; with None no payload (nor any cut)."""
        return await list_messages(self._db, where, limit=limit, offset=offset,
                                   segment_bytes=self._segment_bytes,
                                   payload_bytes=payload_bytes, tenant=tenant)
