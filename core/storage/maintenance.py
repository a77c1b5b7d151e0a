"""Typed calls of the reaper's statements (schema/queries/reaper.sql)."""

from __future__ import annotations

from dataclasses import dataclass

from core.storage.statements import Conn, Statement


@dataclass(frozen=True, slots=True)
class ExpiredLease:
    queue_id: int | None  # None when the partition went away meanwhile
    partition_id: int


@dataclass(frozen=True, slots=True)
class RetentionTarget:
    partition_id: int
    queue_id: int
    retention: int  # seconds; 0 = off
    completed_retention: int  # seconds; 0 = off


@dataclass(frozen=True, slots=True)
class RetentionResult:
    segments: int
    log_start: int | None
    by_age: int  # messages released by the retention cut-off
    by_completion: int  # messages released by the completed cut-off


_EXPIRE_LEASES = Statement("reaper_expire_leases", ExpiredLease)
_DUE_RETRIES = Statement("reaper_due_retries", ExpiredLease)
_TRY_LOCK = Statement[None]("reaper_try_lock")
_PRUNE_TXN_INDEX = Statement[None]("reaper_prune_txn_index")
_RETENTION_PARTITIONS = Statement("reaper_retention_partitions", RetentionTarget)
_APPLY_RETENTION = Statement("reaper_apply_retention", RetentionResult)


async def expire_leases(conn: Conn, *, batch: int) -> list[ExpiredLease]:
    return await _EXPIRE_LEASES.rows(conn, batch)


async def due_retries(conn: Conn, *, batch: int) -> list[ExpiredLease]:
    """Clear passed retryDelay not-before times; answer where spans became claimable."""
    return await _DUE_RETRIES.rows(conn, batch)


async def try_lock(conn: Conn, *, key: int) -> bool:
    """A transaction-scoped advisory lock, or False at once if another holds it."""
    return bool(await _TRY_LOCK.value(conn, key))


async def prune_txn_index(conn: Conn, *, batch: int, floor_seconds: int) -> int:
    return int(await _PRUNE_TXN_INDEX.value(conn, batch, floor_seconds))


async def retention_partitions(conn: Conn) -> list[RetentionTarget]:
    return await _RETENTION_PARTITIONS.rows(conn)


async def apply_retention(conn: Conn, *, partition_id: int, retention: int,
                          completed_retention: int, segment_limit: int) -> RetentionResult:
    row = await _APPLY_RETENTION.one(conn, partition_id, retention, completed_retention,
                                     segment_limit)
    assert row is not None
    return row
