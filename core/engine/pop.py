"""Pop: claim spans of partitions under one lease and read their segments, in one statement.

`queen.pop` (schema/functions/30_pop.sql) does the claim in the database: it finds candidate
partitions (data past the group's cursor, no live lease), locks their cursors with SKIP
LOCKED or creates them on first contact (seeded by the subscription rule), spends a budget
of `batch` messages across up to `max_partitions` of them, leases the delivered spans (or
commits them, with autoAck), and answers the segments overlapping each span. The result
carries those stored segments (`Claim.segments`, decrypted when sealed: no reader ever
sees ciphertext), for an answer that sends stored frames unchanged; `PopResult.messages()`
decompresses and slices them for a JSON answer.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.engine import encryption, fanout, segments
from core.engine.options import POP_LEASE_FALLBACK_SECONDS
from core.errors import StorageDeadlock
from core.ids import LeaseId, PartitionId, QueueId, uuid7
from core.storage import reads as sql
from core.storage.database import Database
from core.timefmt import parse_iso

QUEUE_MODE = "__QUEUE_MODE__"
# Candidates fetched per wanted partition: the extras absorb partitions that a concurrent
# pop locks first (SKIP LOCKED) without a second scan.
_CANDIDATE_FACTOR = 2
_CANDIDATE_EXTRA = 8
# Attempts of a pop that PostgreSQL aborts to break a deadlock: pops creating the cursors of
# the same fresh partitions in opposite orders (hints first vs. a scan from a random pivot)
# wait for each other's insert. The aborted statement changed nothing, so it is run again.
_DEADLOCK_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class PopRequest:
    """What a pop asks for. `queue` or (`namespace`/`task`) names the queues."""

    group: str
    batch: int
    max_partitions: int = 1
    queue: str | None = None
    partition: str | None = None
    namespace: str | None = None
    task: str | None = None
    auto_ack: bool = False
    lease_seconds: int = 0  # 0 = the queue's leaseTime
    subscription_mode: str = "all"
    subscription_from: str = ""
    # Extensions §20 (core/engine/conflation.py): conflation declared; the width of a conflating
    # pop; whether the autopilot chooses the width, and the lane's pops in flight for it.
    conflation: bool = False
    conflation_width: int = 1
    auto_width: bool = False
    # Not part of what a pop asks (core/engine/reads/claims.py lines up equal requests): pops of a
    # line share the statement of the first, with its count.
    in_flight: int = field(default=1, compare=False)


@dataclass(frozen=True, slots=True)
class StoredSegment:
    """A segment as stored: frame i has offset base_offset + i, up to last_offset."""

    base_offset: int
    created_at: datetime
    blob: bytes  # zstd of storage frames (wire-protocol §7.1), decrypted if it was sealed
    last_offset: int


@dataclass(slots=True)
class Claim:
    """One partition of a pop: the delivered offsets [start, end] and the stored segments
    overlapping them (which may hold frames outside the span)."""

    queue_id: QueueId
    queue: str
    partition_id: PartitionId
    partition: str
    start: int
    end: int
    retry_count: int  # failed acks spent on the head of the span so far
    segments: list[StoredSegment] = field(default_factory=list)

    @property
    def count(self) -> int:
        return self.end - self.start + 1


@dataclass(slots=True)  # not frozen: one per message, and frozen __init__ is slow
class Delivered:
    queue: str
    partition: str
    partition_id: PartitionId
    offset: int
    created_at: datetime
    frame: segments.Frame


@dataclass(slots=True)
class PopResult:
    lease_id: LeaseId | None
    claims: list[Claim] = field(default_factory=list)
    queue_ids: list[QueueId] = field(default_factory=list)  # the queues the pop addressed
    conflation: bool | None = None  # a queue it addressed has a conflating group; None: unknown
    width: int | None = None  # partitions it wanted; None: unknown (no claim was tried)
    # Its last check met a database outage: the answer asks nothing more of the database.
    unreachable: bool = False

    @property
    def partitions_claimed(self) -> int:
        return len(self.claims)

    @property
    def count(self) -> int:
        return sum(c.count for c in self.claims)

    def messages(self) -> list[Delivered]:
        """The delivered messages, decompressed and sliced to each span, in claim order."""
        out: list[Delivered] = []
        for claim in self.claims:
            for seg in claim.segments:
                first = max(claim.start - seg.base_offset, 0)
                offset = seg.base_offset + first
                raw = fanout.SEGMENTS.raw(claim.partition_id, seg.base_offset,
                                          seg.last_offset, seg.blob)
                for frame in segments.iter_frames(raw, first, claim.end - seg.base_offset):
                    out.append(Delivered(claim.queue, claim.partition, claim.partition_id,
                                         offset, seg.created_at, frame))
                    offset += 1
        return out


def requested_seed(mode: str, since: str) -> tuple[str, datetime | None]:
    """The request's first-contact rule (§4.2): timestamp, new (skip backlog) or all."""
    since = since.strip()
    if since and since.lower() != "now":
        return "timestamp", parse_iso(since, "subscriptionFrom")
    if since.lower() == "now" or mode.lower() in ("new", "new-only"):
        return "new", None
    return "all", None


async def pop(db: Database, request: PopRequest, hints: Sequence[int] = ()) -> PopResult:
    """Claim and read in one statement; an empty result when nothing is deliverable.

    `hints` are partition ids a wake-up said just became deliverable: they are tried first,
    by key, before the scan of the queue's partitions."""
    lease_id = None if request.auto_ack else LeaseId(str(uuid7()))

    async def claim() -> list[sql.PopRow]:
        async with db.session() as conn:
            return await sql.pop(conn, **_arguments(request), lease_id=lease_id or "",
                                 hints=hints, pivot=random.random())

    for _ in range(_DEADLOCK_ATTEMPTS - 1):
        with contextlib.suppress(StorageDeadlock):
            return _result(lease_id, await claim())
    return _result(lease_id, await claim())


async def pop_shares(db: Database, request: PopRequest, shares: int,
                     hints: Sequence[int] = ()) -> list[PopResult]:
    """`shares` pops of the same request in one statement (queen.pop_shared): each its own
    lease and its own scan pivot, as if made one after the other. Shares past the first
    one that found nothing are not tried and answer nothing; the queues any share looked
    at are given to every fruitless one (what a long poll waits on)."""
    lease_ids = [None if request.auto_ack else LeaseId(str(uuid7())) for _ in range(shares)]

    async def claim() -> list[sql.SharedPopRow]:
        async with db.session() as conn:
            return await sql.pop_shared(
                conn, **_arguments(request), lease_ids=[lid or "" for lid in lease_ids],
                hints=hints, pivots=[random.random() for _ in range(shares)])

    for _ in range(_DEADLOCK_ATTEMPTS - 1):
        with contextlib.suppress(StorageDeadlock):
            rows = await claim()
            break
    else:
        rows = await claim()
    by_share: list[list[sql.PopRow]] = [[] for _ in range(shares)]
    for row in rows:
        by_share[row.share - 1].append(row)
    results = [_result(lease_id, share_rows)
               for lease_id, share_rows in zip(lease_ids, by_share, strict=True)]
    looked_at = [q for r in results for q in r.queue_ids]
    for result in results:
        if not result.claims:
            result.queue_ids = list(dict.fromkeys(looked_at))
    return results


def _arguments(request: PopRequest) -> dict[str, Any]:
    """The statement arguments a pop's request decides (all but lease, hints, pivot)."""
    seed_mode, seed_instant = requested_seed(request.subscription_mode,
                                             request.subscription_from)
    named = request.group != QUEUE_MODE
    wanted = 1 if request.partition is not None else max(
        request.max_partitions, request.conflation_width if request.conflation else 1, 1)
    return {"queue": request.queue, "namespace": request.namespace, "task": request.task,
            "partition": request.partition, "group": request.group, "named": named,
            "seed_mode": seed_mode, "seed_instant": seed_instant,
            "store_seed": named and request.partition is None, "batch": request.batch,
            "partitions": request.max_partitions, "auto_ack": request.auto_ack,
            "lease_seconds": request.lease_seconds,
            "lease_fallback": POP_LEASE_FALLBACK_SECONDS,
            "candidates": wanted * _CANDIDATE_FACTOR + _CANDIDATE_EXTRA,
            "conflation": request.conflation, "conflation_width": request.conflation_width,
            "auto_width": request.auto_width, "in_flight": request.in_flight}


def _result(lease_id: LeaseId | None, rows: Sequence[sql.PopRow]) -> PopResult:
    result = PopResult(lease_id)
    claims: dict[int, Claim] = {}
    for row in rows:
        result.conflation = bool(result.conflation) or bool(row.conflation)
        result.width = row.width
        if row.partition_id is None:  # nothing delivered: the queues it looked at
            result.queue_ids.append(QueueId(row.queue_id))
            continue
        claim = claims.get(row.partition_id)
        if claim is None:
            assert row.partition is not None and row.span_start is not None
            assert row.span_end is not None and row.retry_count is not None
            claim = claims[row.partition_id] = Claim(
                QueueId(row.queue_id), row.queue, PartitionId(row.partition_id),
                row.partition, row.span_start, row.span_end, row.retry_count)
            result.claims.append(claim)
            if claim.queue_id not in result.queue_ids:
                result.queue_ids.append(claim.queue_id)
        assert row.base_offset is not None and row.created_at is not None
        assert row.blob is not None and row.last_offset is not None
        blob = encryption.opened(row.blob, claim.queue, claim.partition)
        claim.segments.append(StoredSegment(row.base_offset, row.created_at, blob,
                                            row.last_offset))
    return result
