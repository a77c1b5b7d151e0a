"""Typed calls of the read-path statements: pop, the ready set's reseed, ack, lease
extension, offset reads (schema/queries/pop.sql, ready.sql, read.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.storage.statements import Conn, Statement


@dataclass(slots=True)
class ReadyRow:
    """A row of `pop_ready` (migration 093 lists the verdicts): a segment of a delivered
    span (`took`), why another candidate gave nothing and in how many seconds it may
    (`empty`, `leased`, `later`, `busy`), or an addressed queue (`queue`)."""

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


@dataclass(slots=True)
class AckRow:
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


@dataclass(frozen=True, slots=True)
class AckInput:
    """One ack as the statement takes it."""

    group: str
    partition_id: int
    transaction_id: str
    status: str  # completed | failed | retry | dlq
    lease_id: str | None  # the lease checked; None: no check
    error: str | None
    offset: int | None = None  # found by a segment search; None: use the index
    tenant: str = ""  # the caller's: another tenant's partition is taken for none at all


@dataclass(frozen=True, slots=True)
class LeaseExpiry:
    lease_id: str
    lease_expires_at: datetime


@dataclass(frozen=True, slots=True)
class PartitionState:
    queue_id: int
    partition_id: int | None
    last_offset: int | None
    log_start: int | None


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


_POP_READY = Statement("pop_ready", ReadyRow)
_READY_SCAN = Statement("ready_scan", ScannedPartition)
_QUEUE_PARTITION_IDS = Statement[None]("queue_partition_ids")
_ACK = Statement("ack", AckRow)
_SPAN_SEGMENTS = Statement("span_segments", PlacedSegmentRow)
_EXTEND_LEASES = Statement("extend_leases", LeaseExpiry)
_FETCH_PARTITION_STATE = Statement("fetch_partition_state", PartitionState)
_FETCH_SEGMENTS = Statement("fetch_segments", RangeRow)


async def pop_ready(conn: Conn, *, tenant: str, queue: str | None, namespace: str | None,
                    task: str | None, partition: str | None, group: str, named: bool,
                    seed_mode: str, seed_instant: datetime | None, store_seed: bool,
                    batch: int, partitions: int, auto_ack: bool, lease_seconds: int,
                    lease_fallback: int, lease_id: str, candidates: Sequence[int],
                    conflation: bool = False, conflation_width: int = 1) -> list[ReadyRow]:
    """Claim among candidates and read, in one statement (schema/functions/30_pop.sql)."""
    return await _POP_READY.rows(conn, queue, namespace, task, partition, group, named,
                                 seed_mode, seed_instant, store_seed, batch, partitions,
                                 auto_ack, lease_seconds, lease_fallback, lease_id,
                                 list(candidates), conflation, conflation_width, tenant)


async def ready_scan(conn: Conn, *, queue_id: int, group: str, after: int,
                     limit: int) -> list[ScannedPartition]:
    """A page of the reseed (schema/queries/ready.sql)."""
    return await _READY_SCAN.rows(conn, queue_id, group, after, limit)


async def queue_partition_ids(conn: Conn, *, queue: str, tenant: str) -> list[int]:
    """The ids of a queue's partitions (schema/queries/ready.sql)."""
    return [int(v) for v in await _QUEUE_PARTITION_IDS.values(conn, queue, tenant)]


async def ack(conn: Conn, *, items: Sequence[AckInput], scan_missing: bool) -> list[AckRow]:
    """Apply acks in one statement (schema/functions/40_ack.sql)."""
    return await _ACK.rows(
        conn, [i.group for i in items], [i.partition_id for i in items],
        [i.transaction_id for i in items], [i.status for i in items],
        [i.lease_id for i in items], [i.error for i in items], [i.offset for i in items],
        scan_missing, [i.tenant for i in items])


async def span_segments(conn: Conn, *, partition_id: int, lo: int,
                        hi: int) -> list[PlacedSegmentRow]:
    return await _SPAN_SEGMENTS.rows(conn, partition_id, lo, hi)


async def extend_leases(conn: Conn, *, lease_ids: Sequence[str], seconds: Sequence[float],
                        tenants: Sequence[str]) -> list[LeaseExpiry]:
    """The new expiry of every live lease of the (distinct) lease ids on their tenants'
    queues; none for expired ones."""
    return await _EXTEND_LEASES.rows(conn, list(lease_ids), list(seconds), list(tenants))


async def fetch_partition_state(conn: Conn, *, tenant: str, queue: str,
                                partition: str) -> PartitionState | None:
    return await _FETCH_PARTITION_STATE.one(conn, queue, partition, tenant)


async def fetch_segments(conn: Conn, *, partition_id: int, offset: int,
                         limit: int) -> list[RangeRow]:
    return await _FETCH_SEGMENTS.rows(conn, partition_id, offset, limit)
