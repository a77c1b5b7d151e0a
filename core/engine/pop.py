"""Pop: claim spans of partitions under one lease and read their segments, in one statement.

`queen.pop_ready` (schema/functions/30_pop.sql) does the claim in the database among the
candidate partitions a process's ready set hands it (core/engine/ready): it locks their
cursors with SKIP LOCKED or creates them on first contact (seeded by the subscription rule),
spends a budget of `batch` messages across up to `max_partitions` of them, leases the
delivered spans (or commits them, with autoAck), answers the segments overlapping each span,
and says of every other candidate what it found (`CandidateVerdict`). The result
carries those stored segments (`Claim.segments`, decrypted when sealed: no reader ever
sees ciphertext), for an answer that sends stored frames unchanged; `PopResult.spans()`
decompresses them and says which frames each span delivers (the JSON answer splices those
frames' bytes), and `PopResult.messages()` decodes them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from core import segments
from core.engine import encryption, fanout
from core.engine.directory import DIRECTORY, PartitionName
from core.errors import StorageDeadlock
from core.ids import LeaseId, PartitionId, QueueId, uuid7
from core.options import POP_LEASE_FALLBACK_SECONDS, POP_MAX_BYTES
from core.storage import reads as sql
from core.storage.database import Database
from core.timefmt import parse_iso

QUEUE_MODE = "__QUEUE_MODE__"
# Attempts of a pop that PostgreSQL aborts to break a deadlock: pops creating the cursors of
# the same fresh partitions in opposite orders could wait for each other's insert (the claim
# creates them in partition order; this is the backstop). The aborted statement changed nothing, so it is run again.
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
    # Extensions §20 (core/engine/conflation.py): conflation declared; the width of a
    # conflating pop. (The autopilot's width arrives as max_partitions: core/service.py.)
    conflation: bool = False
    conflation_width: int = 1
    tenant: str = ""  # whose queues it addresses (core/tenancy); '' is the default tenant
    # The answer's byte budget (QUEEN_POP_MAX_BYTES): what the segments delivered may hold,
    # uncompressed; the first message goes out whatever its size (schema/functions/30_pop.sql).
    max_bytes: int = POP_MAX_BYTES


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
    # The byte budget cut the delivery: the pop has all it may carry (asks for no more).
    full: bool = False

    @property
    def partitions_claimed(self) -> int:
        return len(self.claims)

    @property
    def count(self) -> int:
        return sum(c.count for c in self.claims)

    def bytes_counted(self) -> int:
        """The bytes of the delivered messages as the claim counts them against the budget
        (schema/functions/30_pop.sql): each segment's frames' size, the share delivered."""
        total = 0
        for claim in self.claims:
            for seg in claim.segments:
                frames = seg.last_offset - seg.base_offset + 1
                delivered = (min(claim.end, seg.last_offset)
                             - max(claim.start, seg.base_offset) + 1)
                total += segments.content_size(seg.blob) * delivered // frames
        return total

    def spans(self) -> Iterator[tuple[Claim, StoredSegment, bytes, int, int]]:
        """Per stored segment of each claim, in delivery order: the claim, the segment, its
        frames decompressed, and the indexes of the first and last delivered frame in them
        (the segment may hold frames outside the claim's span)."""
        for claim in self.claims:
            for seg in claim.segments:
                raw = fanout.SEGMENTS.raw(claim.partition_id, seg.base_offset,
                                          seg.last_offset, seg.blob)
                yield (claim, seg, raw, max(claim.start - seg.base_offset, 0),
                       claim.end - seg.base_offset)

    def messages(self) -> list[Delivered]:
        """The delivered messages, decompressed and sliced to each span, in claim order."""
        out: list[Delivered] = []
        for claim, seg, raw, first, last in self.spans():
            offset = seg.base_offset + first
            for frame in segments.iter_frames(raw, first, last):
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


@dataclass(frozen=True, slots=True)
class CandidateVerdict:
    """What a claim found at a candidate (migration 093): `took` (its lease ends in `due_in`
    seconds; None with autoAck), `empty`, `leased` or `later` (until `due_in` seconds from
    the statement), or `busy`. `waiting`: of a `later` that minPopWaitTime alone holds, the
    messages waiting there (a pop of a batch they fill would take them; a larger one not
    before `due_in`); None otherwise."""

    queue_id: QueueId
    partition_id: PartitionId
    partition: str | None
    kind: str
    due_in: float | None
    waiting: int | None = None


@dataclass(slots=True)
class Claimed:
    """A claim statement's answer: the pop's result and a verdict on every other candidate."""

    result: PopResult
    verdicts: list[CandidateVerdict] = field(default_factory=list)


async def claim(db: Database, request: PopRequest, candidates: Sequence[int],
                width: int, lease_id: LeaseId | None = None) -> Claimed:
    """Claim among `candidates` (partition ids; ignored when the request names its
    partition) in one statement, wanting `width` partitions (a conflating queue's group:
    the request's conflation width). No candidates: the statement only looks up (and
    registers the group on) the addressed queues. `lease_id`: the lease to claim under (a
    pop's second statement extends its first one's lease); a new one by default."""
    shards = db.shards
    # On Citus the candidates are on one shard (core/engine/ready/reader.py): the statement
    # runs on its node, and the lease id names it (core/storage/shards.py).
    shard = shards.shard_of(candidates[0]) if candidates else 0
    route = shards.route(shard) if candidates else None
    if shards.distributed and route is None and request.partition is not None \
            and request.queue is not None:
        # A named partition the ready set does not know yet: its shard from the directory,
        # so the claim and its lease are on that shard too.
        async with db.session() as conn:
            found = await DIRECTORY.look_up(conn, PartitionName(
                request.queue, request.partition, request.tenant))
        if found is not None and found[1] is not None:
            shard = shards.shard_of(found[1])
            route = shards.route(shard)
    if request.auto_ack:
        lease_id = None
    elif lease_id is None:
        lease_id = shards.lease_id(shard) if shards.distributed else LeaseId(str(uuid7()))
    seed_mode, seed_instant = requested_seed(request.subscription_mode,
                                             request.subscription_from)
    named = request.group != QUEUE_MODE

    async def statement() -> list[sql.ReadyRow]:
        async with db.session(route) as conn:
            return await sql.pop_ready(
                conn, route=route, tenant=request.tenant, queue=request.queue,
                namespace=request.namespace, task=request.task,
                partition=request.partition, group=request.group, named=named,
                seed_mode=seed_mode, seed_instant=seed_instant,
                store_seed=named and request.partition is None, batch=request.batch,
                partitions=width, auto_ack=request.auto_ack,
                lease_seconds=request.lease_seconds,
                lease_fallback=POP_LEASE_FALLBACK_SECONDS, lease_id=lease_id or "",
                candidates=candidates, max_bytes=request.max_bytes,
                conflation=request.conflation, conflation_width=request.conflation_width)

    for _ in range(_DEADLOCK_ATTEMPTS - 1):
        with contextlib.suppress(StorageDeadlock):
            return _claimed(lease_id, await statement())
    return _claimed(lease_id, await statement())


def _claimed(lease_id: LeaseId | None, rows: Sequence[sql.ReadyRow]) -> Claimed:
    result = PopResult(lease_id)
    answer = Claimed(result)
    claims: dict[int, Claim] = {}
    for row in rows:
        result.width = row.width
        if row.verdict == "queue":
            assert row.queue is not None
            result.conflation = bool(result.conflation) or bool(row.conflation)
            if row.queue_id not in result.queue_ids:
                result.queue_ids.append(QueueId(row.queue_id))
            continue
        if row.verdict == "full":
            result.full = True
            continue
        assert row.partition_id is not None
        if row.verdict != "took" or row.partition_id not in claims:
            waiting = None
            if row.verdict == "later" and row.span_start is not None \
                    and row.span_end is not None:
                waiting = row.span_end - row.span_start + 1
            answer.verdicts.append(CandidateVerdict(
                QueueId(row.queue_id), PartitionId(row.partition_id), row.partition,
                row.verdict, row.due_in, waiting))
        if row.verdict != "took":
            continue
        claim = claims.get(row.partition_id)
        if claim is None:
            assert row.queue is not None and row.partition is not None
            assert row.span_start is not None and row.span_end is not None
            assert row.retry_count is not None
            claim = claims[row.partition_id] = Claim(
                QueueId(row.queue_id), row.queue, PartitionId(row.partition_id),
                row.partition, row.span_start, row.span_end, row.retry_count)
            result.claims.append(claim)
        assert row.base_offset is not None and row.created_at is not None
        assert row.blob is not None and row.last_offset is not None
        assert row.span_end is not None
        # A span the byte budget cut ends at its last row's span_end or, cut between
        # segments, with its last segment (schema/functions/30_pop.sql).
        claim.end = min(row.span_end, row.last_offset)
        blob = encryption.opened(row.blob, claim.queue, claim.partition)
        claim.segments.append(StoredSegment(row.base_offset, row.created_at, blob,
                                            row.last_offset))
    return answer
