"""Pop: claim spans of partitions under one lease and read their messages.

One database transaction per attempt: find candidate partitions (data past the group's
cursor, no live lease), lock their cursors with SKIP LOCKED (or create them on first contact,
seeded by the subscription rule), read the segments overlapping each span, and record the
lease (or, with autoAck, commit the cursor). A global budget of `batch` messages is spent
across up to `max_partitions` partitions in claim order; partitions that end up with nothing
to deliver (budget spent, or messages still hidden by delayedProcessing) are not leased.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from core import segments
from core.db import Database, storage_errors
from core.ids import LeaseId, PartitionId, QueueId, uuid7
from core.queries import QUERIES
from core.timefmt import parse_iso

QUEUE_MODE = "__QUEUE_MODE__"
DEFAULT_LEASE_SECONDS = 60
# Candidates fetched per wanted partition: the extras absorb partitions that a concurrent
# pop locks first (SKIP LOCKED) without a second scan.
_CANDIDATE_FACTOR = 2
_CANDIDATE_EXTRA = 8


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
    messages: list[Delivered] = field(default_factory=list)
    partitions_claimed: int = 0
    queue_ids: list[QueueId] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Queue:
    id: QueueId
    name: str
    options: dict[str, Any]
    seed_mode: str  # all | new | timestamp
    seed_instant: datetime | None

    @property
    def lease_seconds(self) -> int:
        lease = int(self.options.get("leaseTime") or 0)
        return lease if lease > 0 else DEFAULT_LEASE_SECONDS

    @property
    def delay_seconds(self) -> int:
        return int(self.options.get("delayedProcessing") or 0)

    @property
    def window_buffer(self) -> int:
        return int(self.options.get("windowBuffer") or 0)


@dataclass(slots=True)
class _Claim:
    partition_id: PartitionId
    queue: _Queue
    partition: str
    committed: int
    last_offset: int


def requested_seed(mode: str, since: str) -> tuple[str, datetime | None]:
    """The request's first-contact rule (§4.2): timestamp, new (skip backlog) or all."""
    since = since.strip()
    if since and since.lower() != "now":
        return "timestamp", parse_iso(since, "subscriptionFrom")
    if since.lower() == "now" or mode.lower() in ("new", "new-only"):
        return "new", None
    return "all", None


async def pop(db: Database, request: PopRequest, hints: Sequence[int] = ()) -> PopResult:
    """Claim and read; answer an empty result when nothing is deliverable.

    `hints` are partition ids a wake-up said just became deliverable: they are tried first,
    by primary key, before the scan of the queue's partitions."""
    lease_id = None if request.auto_ack else LeaseId(str(uuid7()))
    async with db.connection() as conn:
        with storage_errors():
            # The lookups lock nothing and run autocommitted, so an empty poll (the common
            # case for parked long polls) costs two statements and no transaction.
            queues = await _load_queues(conn, request)
            if not queues:
                return PopResult(lease_id)
            result = PopResult(lease_id, queue_ids=list(queues))
            if hints and not any(q.window_buffer for q in queues.values()):
                hinted = await conn.fetch(QUERIES["pop_hinted_candidates"], list(hints),
                                          list(queues), request.group, request.partition)
                if await _claim_and_read(conn, request, queues, list(hinted), result):
                    return result
            await _claim_and_read(conn, request, queues,
                                  await _candidates(conn, request, queues), result)
    return result


async def _claim_and_read(conn: asyncpg.Connection, request: PopRequest,
                          queues: dict[QueueId, _Queue], candidates: list[asyncpg.Record],
                          result: PopResult) -> bool:
    """One transaction: claim among the candidates and read; answer whether it delivered."""
    if not candidates:
        return False
    async with conn.transaction():
        claims = await _claim(conn, request, queues, candidates)
        if claims:
            await _read_and_lease(conn, request, claims, result)
    return bool(result.messages)


async def _load_queues(conn: asyncpg.Connection, request: PopRequest) -> dict[QueueId, _Queue]:
    if request.queue is not None:
        rows = await conn.fetch(QUERIES["pop_queue_by_name"], request.queue, request.group)
    else:
        rows = await conn.fetch(QUERIES["pop_queues_by_namespace_task"], request.namespace,
                                request.task, request.group)
    mode, instant = requested_seed(request.subscription_mode, request.subscription_from)
    named = request.group != QUEUE_MODE
    queues: dict[QueueId, _Queue] = {}
    for row in rows:
        seed_mode, seed_instant = mode, instant
        if not named:
            seed_mode, seed_instant = "all", None  # competing consumers start at the oldest
        elif row["sub_mode"] is not None:
            seed_mode, seed_instant = row["sub_mode"], row["sub_from"]
        elif request.partition is None:
            # First wildcard/discovery pop of this group on this queue: remember the choice
            # so partitions it touches later are seeded from the same instant.
            stored = await conn.fetchrow(QUERIES["store_subscription"], row["id"],
                                         request.group, mode, instant)
            assert stored is not None
            seed_mode, seed_instant = stored["mode"], stored["subscription_from"]
        if seed_mode == "new" and seed_instant is not None:
            seed_mode = "timestamp"  # a stored "new" is the instant it was first chosen
        queues[QueueId(row["id"])] = _Queue(QueueId(row["id"]), row["name"],
                                            msgspec.json.decode(row["options"]),
                                            seed_mode, seed_instant)
    return queues


def _wanted_partitions(request: PopRequest) -> int:
    return 1 if request.partition is not None else request.max_partitions


async def _candidates(conn: asyncpg.Connection, request: PopRequest,
                      queues: dict[QueueId, _Queue]) -> list[asyncpg.Record]:
    limit = _wanted_partitions(request) * _CANDIDATE_FACTOR + _CANDIDATE_EXTRA
    return list(await conn.fetch(QUERIES["pop_candidates"], list(queues), request.group,
                                 request.partition, limit, random.random()))


async def _claim(conn: asyncpg.Connection, request: PopRequest, queues: dict[QueueId, _Queue],
                 candidates: list[asyncpg.Record]) -> list[_Claim]:
    """Lock (or create) the candidates' cursors that are still claimable; skip the rest."""
    wanted = _wanted_partitions(request)
    locked: dict[int, asyncpg.Record] = {}
    existing = [r["partition_id"] for r in candidates if not r["fresh"]]
    if existing:
        for row in await conn.fetch(QUERIES["pop_lock_cursors"], existing, request.group):
            locked[row["partition_id"]] = row
    # Create only as many cursors as this pop still needs: a concurrent first pop inserting
    # the same (partition, group) makes ON CONFLICT wait for its commit, so every extra row
    # is a chance to queue behind another consumer.
    fresh = [r for r in candidates if r["fresh"]][:max(0, wanted - len(locked))]
    if fresh:
        modes = [queues[r["queue_id"]].seed_mode for r in fresh]
        instants = [queues[r["queue_id"]].seed_instant for r in fresh]
        for row in await conn.fetch(QUERIES["pop_create_cursors"],
                                    [r["partition_id"] for r in fresh], request.group,
                                    modes, instants):
            locked[row["partition_id"]] = row
    claims: list[_Claim] = []
    for candidate in candidates:  # keep the scan order
        cursor = locked.get(candidate["partition_id"])
        if cursor is None or cursor["committed"] >= candidate["last_offset"]:
            continue
        claims.append(_Claim(PartitionId(candidate["partition_id"]),
                             queues[candidate["queue_id"]], candidate["name"],
                             cursor["committed"], candidate["last_offset"]))
        if len(claims) == wanted:
            break
    return claims


async def _read_and_lease(conn: asyncpg.Connection, request: PopRequest, claims: list[_Claim],
                          result: PopResult) -> None:
    # Every claim may take the whole budget; the budget is then spent in claim order.
    ends = [min(c.last_offset, c.committed + request.batch) for c in claims]
    rows = await conn.fetch(
        QUERIES["pop_read_segments"], [c.partition_id for c in claims],
        [c.committed + 1 for c in claims], ends, [c.queue.delay_seconds for c in claims])
    by_partition: dict[int, list[asyncpg.Record]] = {}
    for row in rows:
        by_partition.setdefault(row["partition_id"], []).append(row)
    budget = request.batch
    taken: list[tuple[_Claim, int, int]] = []  # claim, span end, count
    for claim, end in zip(claims, ends):
        if budget <= 0:
            break
        delivered = 0
        last = claim.committed
        for seg in by_partition.get(claim.partition_id, []):
            for i, frame in enumerate(segments.unpack(seg["blob"])):
                offset = seg["base_offset"] + i
                if offset <= claim.committed:
                    continue
                if offset > end or delivered >= budget or offset != last + 1:
                    break
                result.messages.append(Delivered(claim.queue.name, claim.partition,
                                                 claim.partition_id, offset,
                                                 seg["created_at"], frame))
                delivered += 1
                last = offset
        if delivered:
            budget -= delivered
            taken.append((claim, last, delivered))
    if not taken:
        return
    ids = [c.partition_id for c, _, _ in taken]
    his = [hi for _, hi, _ in taken]
    if request.auto_ack:
        await conn.execute(QUERIES["pop_auto_commit"], ids, request.group, his,
                           [n for _, _, n in taken])
    else:
        secs = [request.lease_seconds or c.queue.lease_seconds for c, _, _ in taken]
        await conn.execute(QUERIES["pop_take_leases"], ids, request.group, his,
                           result.lease_id, secs)
    result.partitions_claimed = len(taken)
