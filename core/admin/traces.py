"""Traces (wire-protocol §6.4): notes consumers attach to the messages they process.

A trace names its message by address (partitionId, transactionId) and carries a consumer
group, an event type, free JSON data and trace names, which tie notes about different
messages into one story (`by_name`) and are listed with their counts (`names`). The
message's offset is resolved when the trace is written, so `by_name` can show each
message's payload (`message_payload`) with one read of the segments holding them; it is
None once retention has removed the message, or when the index no longer had it. The
reaper deletes traces older than TRACE_RETENTION_DAYS (`core.upkeep.maintenance.expire_traces`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from core import segments
from core.engine import encryption
from core.errors import NotFound
from core.ids import PartitionId, uuid7
from core.pages import OffsetPage, offset_page
from core.storage import traces as sql
from core.storage import writes
from core.storage.database import Database
from core.storage.statements import Conn

# What the lookups answer (rows of the storage statements).
Trace = sql.TraceRow
NamedTraceRow = sql.NamedTraceRow
TraceName = sql.TraceNameRow

# The most traces one page of a message's answers (a consumer tracing in a loop must not
# make the lookup unbounded); the rest follow from `nextOffset`.
MESSAGE_TRACES_LIMIT = 1000

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NewTrace:
    partition_id: PartitionId
    transaction_id: str
    group: str
    event_type: str
    data: bytes  # one JSON document
    names: Sequence[str]


@dataclass(frozen=True, slots=True)
class Recorded:
    trace_id: uuid.UUID
    created_at: datetime


@dataclass(frozen=True, slots=True)
class NamedTrace:
    row: sql.NamedTraceRow
    message_payload: bytes | None  # JSON bytes of the message, when it is still stored


def _page(found: list[T], total: int, offset: int, limit: int | None) -> OffsetPage[T]:
    """A page starting at `offset` of `total` traces; with no `limit` (the caller asked for
    all of them), every trace after the page makes it truncated."""
    return offset_page(found, total, offset,
                       total - offset if limit is None else min(limit, total - offset))


@dataclass(frozen=True, slots=True)
class NamePage:
    names: list[sql.TraceNameRow]
    total: int


class Traces:
    def __init__(self, db: Database, *, list_max_bytes: int) -> None:
        self._db = db
        # The bytes of traces' data (and, by name, messages' payloads) one page answers
        # (QUEEN_LIST_MAX_BYTES): either may be 16 MiB, and a page holds up to 1000 traces.
        self._list_max_bytes = list_max_bytes

    async def record(self, trace: NewTrace, *, tenant: str = "") -> Recorded:
        """Store a trace; NotFound when its partition does not exist (among the tenant's)."""
        trace_id = uuid7()
        names = list(dict.fromkeys(trace.names))  # each name once, in the order given
        async with self._db.session() as conn:
            created = await sql.insert(
                conn, tenant=tenant, trace_id=trace_id, partition_id=trace.partition_id,
                transaction_id=trace.transaction_id, group=trace.group,
                event_type=trace.event_type, data=trace.data, names=names)
        if created is None:
            raise NotFound("partition not found")
        return Recorded(trace_id, created)

    async def of_message(self, partition_id: PartitionId, transaction_id: str, *,
                         offset: int = 0, tenant: str = "") -> OffsetPage[Trace]:
        """A page of a message's traces from `offset`, oldest first (an unknown message has
        none): up to MESSAGE_TRACES_LIMIT, ended early where their data pass the budget (the
        first kept; the statement cuts, the traces left out are not read). The caller gives
        no limit: the page is truncated whenever traces follow it."""
        async with self._db.session() as conn:
            rows = await sql.of_message(conn, tenant=tenant, partition_id=partition_id,
                                        transaction_id=transaction_id,
                                        limit=MESSAGE_TRACES_LIMIT, offset=offset,
                                        max_bytes=self._list_max_bytes)
            total = await sql.count_of_message(conn, tenant=tenant, partition_id=partition_id,
                                               transaction_id=transaction_id)
        return _page(rows, total, offset, None)

    async def by_name(self, name: str, *, limit: int, offset: int,
                      tenant: str = "") -> OffsetPage[NamedTrace]:
        """One page of the tenant's traces carrying `name`, newest first, and their total
        number. The page ends early where its traces' data and their messages' payloads
        pass the budget, its first trace kept whatever its size: the statement cuts by the
        data (the traces left out are not read), `_payloads` by both as it reads them."""
        async with self._db.session() as conn:
            rows = await sql.by_name(conn, tenant=tenant, name=name, limit=limit,
                                     offset=offset, max_bytes=self._list_max_bytes)
            total = await sql.count_by_name(conn, tenant=tenant, name=name)
            found = await _payloads(conn, rows, self._list_max_bytes)
        # Short of `limit` with traces left after it: the budget ended the page.
        return _page(found, total, offset, limit)

    async def names(self, *, limit: int, offset: int, search: str | None,
                    tenant: str = "") -> NamePage:
        async with self._db.session() as conn:
            rows = await sql.names_page(conn, tenant=tenant, limit=limit, offset=offset,
                                        search=search)
        return NamePage(rows, rows[0].total if rows else 0)


async def _payloads(conn: Conn, rows: Sequence[sql.NamedTraceRow],
                    max_bytes: int) -> list[NamedTrace]:
    """The traces with the stored payload at each one's (partition, offset) (decrypted when
    the segment is sealed: encryption at rest), in order, up to where their data and
    payloads pass `max_bytes`, the first kept. Segments are read one at a time as the page
    reaches them, each once: what follows the cut is never read."""
    wanted: dict[int, set[int]] = {}
    for r in rows:
        if r.msg_offset is not None and r.queue is not None and r.partition is not None:
            wanted.setdefault(r.partition_id, set()).add(r.msg_offset)
    found: dict[tuple[int, int], bytes] = {}
    read: set[tuple[int, int]] = set()  # (partition, offset) looked up, found or not
    out: list[NamedTrace] = []
    held = 0
    for r in rows:
        at = r.msg_offset
        if at is not None and r.queue is not None and r.partition is not None \
                and (r.partition_id, at) not in read:
            for seg in await writes.segments_at(conn, partition_id=r.partition_id,
                                                offsets=[at]):
                frames = segments.unpack(encryption.opened(seg.blob, r.queue, r.partition))
                # Every offset of the page this segment holds: it is read once.
                for o in wanted[r.partition_id]:
                    if 0 <= o - seg.base_offset < len(frames):
                        found[(r.partition_id, o)] = frames[o - seg.base_offset].payload
                        read.add((r.partition_id, o))
            read.add((r.partition_id, at))
        payload = None if at is None else found.get((r.partition_id, at))
        held += len(r.data) + (0 if payload is None else len(payload))
        if out and held > max_bytes:
            break
        out.append(NamedTrace(r, payload))
    return out
