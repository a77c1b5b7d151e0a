"""The reaper's steps: lease expiry, transactionId-index pruning, segment retention and
trace retention.

Each step is a short statement (or a few, each bounded by a batch size) that is safe to run
from several processes at once and safe to interrupt at any point: all state lives in the
rows themselves, so a killed reaper loses nothing and a restarted one simply finds the work
still there. Double application is prevented in the database:

- lease expiry locks the rows it releases with `FOR UPDATE SKIP LOCKED` (on Citus: a read
  of every shard finds them, then one call per shard locks and releases that shard's own,
  so no write spans two nodes; `_release_by_shard`);
- index pruning and retention run under transaction-scoped advisory locks
  (`pg_try_advisory_xact_lock`), so a second reaper skips a unit another one is doing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from core.counters import COUNTERS
from core.engine.wakeup import Wake
from core.storage import maintenance as sql
from core.storage import traces
from core.storage.database import Database

Announce = Callable[[Iterable[Wake]], None]

# Advisory lock keys: "qreap" in ASCII in the high bytes, the unit in the low ones. Far from
# the migration lock (0x717565656E) and from anything keyed by a small integer.
_LOCK_BASE = 0x7172656170 << 20
INDEX_PRUNE_LOCK = _LOCK_BASE
TRACE_RETENTION_LOCK = _LOCK_BASE + 2
_RETENTION_LOCK_BASE = _LOCK_BASE + (1 << 19)

# Index rows younger than this are kept even when the queue's dedup window is shorter (or 0 =
# dedup off): the index also resolves ack addresses, and keeping it for an hour keeps acks of
# recently pushed messages an index lookup instead of a segment scan. The dedup check compares
# created_at with the window itself, so keeping rows longer never causes false duplicates.
INDEX_KEEP_FLOOR_SECONDS = 3600

LEASE_BATCH = 1000
# On Citus, the rows that place a lease on its shard (queen.log_leases) are kept this long
# after the lease ended (an extension of it finds nothing to extend by then anyway).
LEASE_ROWS_KEPT_SECONDS = 60
TRACE_BATCH = 10_000
INDEX_PRUNE_BATCH = 10_000
_PRUNE_PARTITIONS = 1000  # on Citus: partitions one read of every shard finds to prune
# Upper bound of batches per step per pass, so one pass stays short and the loop keeps its
# cadence even with a large backlog; the next pass continues where this one stopped.
MAX_BATCHES_PER_PASS = 20


@dataclass(slots=True)
class PassReport:
    """What one reaper pass did (counts), for logs and tests."""

    leases_expired: int = 0
    index_rows_pruned: int = 0
    segments_deleted: int = 0
    partitions_trimmed: int = 0
    traces_deleted: int = 0
    queues_sampled: int = 0  # analytics rows stored (core/upkeep/stats.py), when a sample was due
    kv_rows_swept: int = 0  # dead KV rows deleted (core/kv/service.py `sweep`)


def retention_lock_key(partition_id: int) -> int:
    # 2**19 partitions share no key; beyond that keys wrap, which only makes two reapers
    # occasionally skip each other's partition for one pass.
    return _RETENTION_LOCK_BASE + (partition_id % (1 << 19))


async def expire_leases(db: Database, *, batch: int = LEASE_BATCH,
                        announce: Announce | None = None) -> int:
    """Release every lease past its expiry, and clear the retryDelay not-before times that
    passed; `announce` wakes parked pops of the affected partitions once each batch
    committed.

    Answers the number of leases released by this call."""
    released = await _release(db, batch=batch, retries=False, announce=announce)
    COUNTERS.add("leases_expired", released)  # queen_leases_expired_total
    # Spans released with a retryDelay are claimable from their not-before time on, which
    # nothing else announces (parked pops skip re-checks while nothing is announced).
    await _release(db, batch=batch, retries=True, announce=announce)
    return released


async def _release(db: Database, *, batch: int, retries: bool,
                   announce: Announce | None) -> int:
    """Release, batch after batch, the leases past their expiry (`retries` false) or the
    retryDelay not-before times that passed (true); announce each batch's partitions.
    Answers how many were released."""
    released = 0
    for _ in range(MAX_BATCHES_PER_PASS):
        if db.shards.distributed:
            found, rows = await _release_by_shard(db, batch=batch, retries=retries)
        else:
            async with db.session() as conn:
                rows = await sql.release_due(conn, batch=batch, retries=retries)
            found = len(rows)
        if announce is not None:
            announce((r.queue_id, r.partition_id) for r in rows if r.queue_id is not None)
        released += len(rows)
        if found < batch:
            break
    return released


async def _release_by_shard(db: Database, *, batch: int, retries: bool
                            ) -> tuple[int, list[sql.ExpiredLease]]:
    """On Citus: the due cursors, read from every shard, released by one call per shard.
    Answers how many the read found and what was released."""
    shards = db.shards
    async with db.session() as conn:
        due = await sql.citus_due_cursors(conn, batch=batch, retries=retries)
        released: list[sql.ExpiredLease] = []
        for shard, cursors in shards.by_shard(due, lambda c: c.partition_id).items():
            route = shards.route(shard)
            assert route is not None
            released += await sql.release_cursors(conn, route=route, cursors=cursors,
                                                  retries=retries)
    return len(due), released


async def forget_leases(db: Database, *, after_seconds: int = LEASE_ROWS_KEPT_SECONDS) -> int:
    """On Citus: drop the rows of leases over for `after_seconds` (one call per shard)."""
    forgotten = 0
    async with db.session() as conn:
        for route in db.shards.routes:
            forgotten += await sql.forget_leases(conn, route=route, after_seconds=after_seconds)
    return forgotten


async def prune_txn_index(db: Database, *, batch: int = INDEX_PRUNE_BATCH,
                          floor_seconds: int = INDEX_KEEP_FLOOR_SECONDS) -> int:
    """Delete transactionId index rows outside their queue's keep horizon, in batches.

    The horizon is greatest(dedupWindowSeconds, floor_seconds). Answers rows deleted; 0 when
    another reaper holds the pruning lock."""
    if db.shards.distributed:
        return await _prune_by_shard(db, batch=batch, floor_seconds=floor_seconds)
    pruned = 0
    for _ in range(MAX_BATCHES_PER_PASS):
        async with db.transaction() as conn:
            if not await sql.try_lock(conn, key=INDEX_PRUNE_LOCK):
                return pruned
            count = await sql.prune_txn_index(conn, batch=batch, floor_seconds=floor_seconds)
        pruned += count
        if count < batch:
            break
    return pruned


async def _prune_by_shard(db: Database, *, batch: int, floor_seconds: int) -> int:
    """On Citus: a read of every shard finds the partitions to prune, then one call per shard
    prunes that shard's, each in a transaction of its own on its node. The lock is a session
    lock, held across the calls (a transaction lock would hold them in one transaction: a
    two-phase commit over the nodes)."""
    shards = db.shards
    pruned = 0
    async with db.session() as conn:
        if not await sql.try_session_lock(conn, key=INDEX_PRUNE_LOCK):
            return 0
        try:
            for _ in range(MAX_BATCHES_PER_PASS):
                targets = await sql.citus_prunable(conn, batch=_PRUNE_PARTITIONS,
                                                   floor_seconds=floor_seconds)
                for shard, group in shards.by_shard(targets, lambda t: t.partition_id).items():
                    route = shards.route(shard)
                    assert route is not None
                    pruned += await sql.prune_keys(conn, route=route, targets=group)
                if len(targets) < _PRUNE_PARTITIONS or pruned >= batch * MAX_BATCHES_PER_PASS:
                    break
        finally:
            await sql.session_unlock(conn, key=INDEX_PRUNE_LOCK)
    return pruned


async def apply_retention(db: Database, *, segment_batch: int) -> tuple[int, int]:
    """Delete whole segments released by retention, advancing each partition's log_start.

    Answers (segments deleted, partitions trimmed) by this call."""
    deleted = trimmed = 0
    async with db.session() as conn:
        targets = await sql.retention_partitions(conn)
    for part in targets:
        pid = part.partition_id
        before = deleted
        for _ in range(MAX_BATCHES_PER_PASS):
            async with db.transaction() as conn:
                if not await sql.try_lock(conn, key=retention_lock_key(pid)):
                    break
                row = await sql.apply_retention(
                    conn, partition_id=pid, retention=part.retention,
                    completed_retention=part.completed_retention, segment_limit=segment_batch)
            count = int(row.segments)
            deleted += count
            # Per partition, for the analytics' retention series (core/upkeep/stats.py)
            COUNTERS.add("retention_segments", count, pid)
            COUNTERS.add("retention_released", row.by_age, pid)
            COUNTERS.add("completed_released", row.by_completion, pid)
            if count < segment_batch:
                break
        trimmed += deleted > before
    return deleted, trimmed


async def expire_traces(db: Database, *, retention_seconds: int,
                        batch: int = TRACE_BATCH) -> int:
    """Delete traces older than `retention_seconds` (with their names), in batches.

    Answers traces deleted; 0 when another reaper holds the trace lock."""
    deleted = 0
    for _ in range(MAX_BATCHES_PER_PASS):
        async with db.transaction() as conn:
            if not await sql.try_lock(conn, key=TRACE_RETENTION_LOCK):
                return deleted
            count = await traces.expire(conn, retention_seconds=retention_seconds,
                                        batch=batch)
        deleted += count
        if count < batch:
            break
    return deleted


async def run_pass(db: Database, *, retention: bool, segment_batch: int,
                   announce: Announce | None = None,
                   trace_retention_seconds: int = 0) -> PassReport:
    """One reaper pass: leases, index, and (when due) retention of segments and of traces
    (`trace_retention_seconds` 0 = keep traces)."""
    report = PassReport()
    report.leases_expired = await expire_leases(db, announce=announce)
    report.index_rows_pruned = await prune_txn_index(db)
    if retention:
        if db.shards.distributed:
            await forget_leases(db)
        report.segments_deleted, report.partitions_trimmed = await apply_retention(
            db, segment_batch=segment_batch)
        if trace_retention_seconds > 0:
            report.traces_deleted = await expire_traces(
                db, retention_seconds=trace_retention_seconds)
    return report
