"""Typed calls of the read-path statements: pop, the ready set's reseed, ack, lease
extension, offset reads (schema/queries/pop.sql, ready.sql, read.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import msgspec

from core.storage.joined import joined
from core.storage.statements import Conn, Routed, Statement


@dataclass(slots=True)
class ReadyRow:
    """A row of `pop_ready` (migration 093 lists the verdicts): a segment of a delivered
    span (`took`), why another candidate gave nothing and in how many seconds it may
    (`empty`, `leased`, `later`, `busy`), an addressed queue (`queue`), or that the byte
    budget cut the delivery (`full`, schema/functions/30_pop.sql)."""

    verdict: str
    queue_id: int
    queue: str | None
    partition_id: int | None
    partition: str | None
    span_start: int | None
    span_end: int | None
    retry_count: int | None
    base_offset: int | None
    created_at: datetime | None
    blob: bytes | None
    last_offset: int | None
    conflation: bool | None  # the group's stored policy on this row's queue (§20.2)
    width: int  # partitions the pop wanted (§20.3, §20.5)
    due_in: float | None  # seconds from now (leased, later)


@dataclass(frozen=True, slots=True)
class ScannedPartition:
    """A partition the reseed found with data for the group (`ready_scan`)."""

    partition_id: int
    partition: str
    due_in: float | None  # seconds until its lease or retryDelay lets go; None: now
    delayed: bool  # its queue's delayedProcessing also holds it: see `ready_heads`


@dataclass(frozen=True, slots=True)
class HeadDue:
    """When the group's next message of a delayedProcessing partition is old enough."""

    partition_id: int
    due_in: float  # seconds from now; not above 0: now


class AckRow(msgspec.Struct):  # one per acknowledged item: built in C (a Struct, not a dataclass)
    """An item's outcome (ok | noop | refused | missing: search offsets scan_from..scan_to),
    or (outcome `wake`) a partition where a span became claimable again."""

    idx: int | None  # 1-based position of the item
    outcome: str
    error: str | None
    lease_released: bool | None
    dlq: bool | None
    queue_id: int | None
    partition_id: int | None
    scan_from: int | None
    scan_to: int | None
    conflated: int | None  # superseded messages a conflated lease's commit retired


@dataclass(slots=True)
class AckInputs:
    """Acks as the statement takes them: one entry per item in each list. A list that
    would hold only None may be None (the statement reads it as all null)."""

    groups: list[str]
    partition_ids: list[int]
    transaction_ids: list[str]
    statuses: list[str]  # completed | failed | retry | dlq
    lease_ids: list[str | None] | None  # the lease checked; None: no check
    errors: list[str | None] | None
    # Each item's caller's tenant: a partition of another tenant's is taken for none at all.
    tenants: list[str]
    offsets: list[int | None] | None = None  # found by a segment search; None: use the index


@dataclass(frozen=True, slots=True)
class LeaseExpiry:
    """A cursor extended (lease_expires_at), or a lease's other shards (routes)."""

    lease_id: str
    lease_expires_at: datetime | None
    routes: list[int] | None


@dataclass(frozen=True, slots=True)
class PartitionHead:
    queue: str
    partition: str
    last_offset: int
    log_start: int
    tenant: str  # the queue's (core/tenancy)


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    partition_id: int
    partition: str


@dataclass(slots=True)
class PlacedSegmentRow:
    """A segment with the names of its queue and partition."""

    queue: str
    partition: str
    base_offset: int
    created_at: datetime
    blob: bytes


@dataclass(slots=True)
class RangeRow:
    base_offset: int
    last_offset: int
    created_at: datetime
    blob: bytes


_POP_READY = Routed("pop_ready", ReadyRow)


async def pop_ready(conn: Conn, *, route: int | None, tenant: str, queue: str | None,
                    namespace: str | None,
                    task: str | None, partition: str | None, group: str, named: bool,
                    seed_mode: str, seed_instant: datetime | None, store_seed: bool,
                    batch: int, partitions: int, auto_ack: bool, lease_seconds: int,
                    lease_fallback: int, lease_id: str, candidates: Sequence[int],
                    max_bytes: int, conflation: bool = False,
                    conflation_width: int = 1) -> list[ReadyRow]:
    """Claim among candidates and read, in one statement (schema/functions/30_pop.sql);
    `route`: the shard of every candidate (core/storage/shards.py), None on one PostgreSQL;
    `max_bytes`: the answer's byte budget (the first message goes out whatever its size)."""
    return await _POP_READY.on(route).rows(
        conn, route=route, tenant=tenant, queue=queue, namespace=namespace, task=task,
        partition=partition, group=group, named=named, seed_mode=seed_mode,
        seed_instant=seed_instant, store_seed=store_seed, batch=batch, partitions=partitions,
        auto_ack=auto_ack, lease_seconds=lease_seconds, lease_fallback=lease_fallback,
        lease_id=lease_id, candidates=list(candidates), conflation=conflation,
        conflation_width=conflation_width, max_bytes=max_bytes)


_READY_SCAN = Statement("ready_scan", ScannedPartition)


async def ready_scan(conn: Conn, *, queue_id: int, group: str, after: int,
                     limit: int) -> list[ScannedPartition]:
    """A page of the reseed (schema/queries/ready.sql)."""
    return await _READY_SCAN.rows(conn, queue_id=queue_id, group=group, after=after,
                                  limit=limit)


_READY_DIRECTORY = Statement("ready_directory", DirectoryEntry)


async def ready_directory(conn: Conn, *, queue_id: int, after: int,
                          limit: int) -> list[DirectoryEntry]:
    """A page of a queue's partitions from the directory (Citus's reseed, first step)."""
    return await _READY_DIRECTORY.rows(conn, queue_id=queue_id, after=after, limit=limit)


_READY_CHECK = Statement("ready_check", ScannedPartition)


async def ready_check(conn: Conn, *, partition_ids: Sequence[int],
                      group: str) -> list[ScannedPartition]:
    """Which of these partitions of one shard may hold data for the group (second step)."""
    return await _READY_CHECK.rows(conn, partition_ids=list(partition_ids), group=group)


_READY_HEADS = Statement("ready_heads", HeadDue)
_READY_HEADS_ON_SHARD = Statement("ready_heads_on_shard", HeadDue)


async def ready_heads(conn: Conn, *, partition_ids: Sequence[int], group: str,
                      on_shard: bool) -> list[HeadDue]:
    """The dues of these delayedProcessing partitions; `on_shard`: on Citus, all of one
    shard."""
    statement = _READY_HEADS_ON_SHARD if on_shard else _READY_HEADS
    return await statement.rows(conn, partition_ids=list(partition_ids), group=group)


_QUEUE_PARTITION_IDS = Statement[None]("queue_partition_ids")


async def queue_partition_ids(conn: Conn, *, queue: str, tenant: str) -> list[int]:
    """The ids of a queue's partitions (schema/queries/ready.sql)."""
    ids = await _QUEUE_PARTITION_IDS.values(conn, queue=queue, tenant=tenant)
    return [int(v) for v in ids]


_ACK = Routed("ack", AckRow)
_ACK_JOINED = Routed("ack_joined", AckRow)


async def ack(conn: Conn, *, route: int | None, items: AckInputs,
              scan_missing: bool) -> list[AckRow]:
    """Apply acks in one statement (schema/functions/40_ack.sql); the text columns go as
    one text each (`ack_joined`) unless a value holds a separator. `route`: the shard of
    every item's partition (core/storage/shards.py), None on one PostgreSQL."""
    tenants = items.tenants
    texts = [joined(items.groups), joined(items.transaction_ids), joined(items.statuses),
             joined(tenants), None if items.lease_ids is None else joined(items.lease_ids)]
    if None in texts[:4] or (items.lease_ids is not None and texts[4] is None):
        return await _ACK.on(route).rows(
            conn, route=route, groups=items.groups, partition_ids=items.partition_ids,
            transaction_ids=items.transaction_ids, statuses=items.statuses,
            lease_ids=items.lease_ids, errors=items.errors, offsets=items.offsets,
            scan_missing=scan_missing, tenants=tenants)
    return await _ACK_JOINED.on(route).rows(
        conn, route=route, groups=texts[0],
        partition_ids=",".join(map(str, items.partition_ids)), transaction_ids=texts[1],
        statuses=texts[2], lease_ids=texts[4], errors=items.errors, offsets=items.offsets,
        scan_missing=scan_missing, tenants=texts[3])


@dataclass(frozen=True, slots=True)
class AckSpanRow:
    """A span of `ack_spans`: applied (all were, or none), its partition's queue, and
    whether offsets past it are claimable now (a wake-up, as `ack` answers one)."""

    idx: int  # 1-based position of the span
    applied: bool
    queue_id: int | None
    wake: bool


_ACK_SPANS = Statement("ack_spans", AckSpanRow)


async def ack_spans(conn: Conn, *, groups: Sequence[str], partition_ids: Sequence[int],
                    lease_ids: Sequence[str], starts: Sequence[int], ends: Sequence[int],
                    tenants: Sequence[str]) -> list[AckSpanRow]:
    """Commit whole deliveries, each the offsets [start, end] of a partition its lease
    holds (schema/functions/40_ack.sql: queen.ack_spans); on one PostgreSQL only."""
    return await _ACK_SPANS.rows(conn, groups=list(groups), partition_ids=list(partition_ids),
                                 lease_ids=list(lease_ids), starts=list(starts),
                                 ends=list(ends), tenants=list(tenants))


_SPAN_SEGMENTS = Statement("span_segments", PlacedSegmentRow)


async def span_segments(conn: Conn, *, partition_id: int, lo: int,
                        hi: int) -> list[PlacedSegmentRow]:
    return await _SPAN_SEGMENTS.rows(conn, partition_id=partition_id, lo=lo, hi=hi)


_EXTEND_LEASES = Routed("extend_leases", LeaseExpiry)


async def extend_leases(conn: Conn, *, route: int | None, lease_ids: Sequence[str],
                        seconds: Sequence[float], tenants: Sequence[str]) -> list[LeaseExpiry]:
    """The new expiry of every live lease of the (distinct) lease ids on their tenants'
    queues; none for expired ones. `route`: the shard the leases were claimed on; None:
    search every cursor."""
    return await _EXTEND_LEASES.on(route).rows(conn, route=route, lease_ids=list(lease_ids),
                                               seconds=list(seconds),
                                               tenants=list(tenants))


_LINK_LEASE = Statement[None]("link_lease")


async def link_lease(conn: Conn, *, route: int, lease_id: str, routes: Sequence[int]) -> None:
    """A lease spans shards: the row on its first shard learns the others' routes."""
    await _LINK_LEASE.run(conn, route=route, lease_id=lease_id, routes=list(routes))


_FETCH_HEAD = Statement("fetch_head", PartitionHead)


async def fetch_head(conn: Conn, *, partition_id: int) -> PartitionHead | None:
    return await _FETCH_HEAD.one(conn, partition_id=partition_id)


_FETCH_SEGMENTS = Statement("fetch_segments", RangeRow)


async def fetch_segments(conn: Conn, *, partition_id: int, offset: int, limit: int,
                         max_bytes: int) -> list[RangeRow]:
    return await _FETCH_SEGMENTS.rows(conn, partition_id=partition_id, offset=offset,
                                      limit=limit, max_bytes=max_bytes)
