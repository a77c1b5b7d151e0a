"""Typed calls of the reaper's statements (schema/queries/reaper.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.storage.statements import Conn, Statement


@dataclass(frozen=True, slots=True)
class ExpiredLease:
    queue_id: int | None  # None when the partition went away meanwhile
    partition_id: int


@dataclass(frozen=True, slots=True)
class DueCursor:
    partition_id: int
    consumer_group: str


@dataclass(frozen=True, slots=True)
class Prunable:
    partition_id: int
    below: int  # one past the highest offset to prune
    cutoff: datetime  # rows appended before it go


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


async def release_due(conn: Conn, *, batch: int, retries: bool) -> list[ExpiredLease]:
    """Release leases past their expiry (or, with `retries`, clear the retryDelay
    not-before times that passed); answer where spans became claimable."""
    return await (_DUE_RETRIES if retries else _EXPIRE_LEASES).rows(conn, batch=batch)


_CITUS_EXPIRED = Statement("citus_reaper_expired", DueCursor)
_CITUS_DUE = Statement("citus_reaper_due", DueCursor)


async def citus_due_cursors(conn: Conn, *, batch: int, retries: bool) -> list[DueCursor]:
    """On Citus: cursors whose lease expired (or, with `retries`, whose retryDelay passed),
    read from every shard."""
    return await (_CITUS_DUE if retries else _CITUS_EXPIRED).rows(conn, batch=batch)


_RELEASE_CURSORS = Statement("release_cursors", ExpiredLease)


async def release_cursors(conn: Conn, *, route: int, cursors: Sequence[DueCursor],
                          retries: bool) -> list[ExpiredLease]:
    """Release cursors of the shard of `route` (their leases, or their not-before times)."""
    return await _RELEASE_CURSORS.rows(conn, route=route,
                                       partition_ids=[c.partition_id for c in cursors],
                                       groups=[c.consumer_group for c in cursors], retries=retries)


_FORGET_LEASES = Statement[None]("forget_leases")


async def forget_leases(conn: Conn, *, route: int, after_seconds: int) -> int:
    return int(await _FORGET_LEASES.value(conn, route=route, after_seconds=after_seconds))


_CITUS_PRUNABLE = Statement("citus_reaper_prunable", Prunable)


async def citus_prunable(conn: Conn, *, batch: int, floor_seconds: int) -> list[Prunable]:
    """On Citus: partitions with index rows to prune, read from every shard."""
    return await _CITUS_PRUNABLE.rows(conn, batch=batch, floor_seconds=floor_seconds)


_PRUNE_KEYS = Statement[None]("prune_keys")


async def prune_keys(conn: Conn, *, route: int, targets: Sequence[Prunable]) -> int:
    """Prune the index rows of partitions of the shard of `route`; answers rows deleted."""
    return int(await _PRUNE_KEYS.value(conn, route=route,
                                       partition_ids=[t.partition_id for t in targets],
                                       belows=[t.below for t in targets],
                                       cutoffs=[t.cutoff for t in targets]))


_TRY_SESSION_LOCK = Statement[None]("reaper_try_session_lock")


async def try_session_lock(conn: Conn, *, key: int) -> bool:
    return bool(await _TRY_SESSION_LOCK.value(conn, key=key))


_SESSION_UNLOCK = Statement[None]("reaper_session_unlock")


async def session_unlock(conn: Conn, *, key: int) -> None:
    await _SESSION_UNLOCK.run(conn, key=key)


_TRY_LOCK = Statement[None]("reaper_try_lock")


async def try_lock(conn: Conn, *, key: int) -> bool:
    """A transaction-scoped advisory lock, or False at once if another holds it."""
    return bool(await _TRY_LOCK.value(conn, key=key))


_PRUNE_TXN_INDEX = Statement[None]("reaper_prune_txn_index")


async def prune_txn_index(conn: Conn, *, batch: int, floor_seconds: int) -> int:
    return int(await _PRUNE_TXN_INDEX.value(conn, batch=batch, floor_seconds=floor_seconds))


_RETENTION_PARTITIONS = Statement("reaper_retention_partitions", RetentionTarget)


async def retention_partitions(conn: Conn) -> list[RetentionTarget]:
    return await _RETENTION_PARTITIONS.rows(conn)


_APPLY_RETENTION = Statement("reaper_apply_retention", RetentionResult)


async def apply_retention(conn: Conn, *, partition_id: int, retention: int,
                          completed_retention: int, segment_limit: int) -> RetentionResult:
    row = await _APPLY_RETENTION.one(conn, partition_id=partition_id, retention=retention,
                                     completed_retention=completed_retention,
                                     segment_limit=segment_limit)
    assert row is not None
    return row
