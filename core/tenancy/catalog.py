"""The caps on a limited tenant's names: how many queues, and partitions per queue.

A write that would create a queue or a partition of a tenant with such a cap (a push, a
transaction, a configure, a timer's destination, a stream's sink, a DLQ replay elsewhere, a
Kafka topic) first goes through `admit`: under a lock of the tenant's names (an advisory
lock in the database, so the count is exact across processes and hosts), it counts what
exists, refuses what would pass a cap (403 quota_exceeded, Queen's texts), and creates the
queues and partitions it admits, so the next count sees them.

Pairs a process knows exist are admitted without asking the database. A tenant found at
its queue cap has at most that many queues: the process reads all their names, and then
refuses a new one, and admits a known one, without asking the database either, until it
counts again (after the refresh interval, or when it deleted one of the tenant's queues).
What a process knows exists is trusted for KNOWN_SECONDS: a queue another process deleted
meanwhile may be written again without a count within that time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from core import options
from core.errors import QuotaExceeded
from core.storage import tenants as sql
from core.storage.database import Database
from core.tenancy.quotas import Quota

KNOWN_SECONDS = 60.0
# (queue, partition); partition None: only the queue (a configure creates no partition)
Pair = tuple[str, str | None]


@dataclass(slots=True)
class _Names:
    """What a process knows of a tenant's names."""

    known_at: float  # since when the pairs below are known to exist
    pairs: set[Pair] = field(default_factory=set)
    queue_names: set[str] = field(default_factory=set)
    # Every queue name of a tenant at its queue cap, as read at `full_at`.
    full: set[str] | None = None
    full_at: float = 0.0

    def has(self, pair: Pair) -> bool:
        return pair in self.pairs or (pair[1] is None and pair[0] in self.queue_names)


class Catalog:
    def __init__(self, db: Database, *, refresh_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._db = db
        self._refresh_s = refresh_s
        self._clock = clock
        self._names: dict[str, _Names] = {}

    def forget(self, tenant: str) -> None:
        """This process deleted one of the tenant's queues: count again next time."""
        self._names.pop(tenant, None)

    async def admit(self, tenant: str, quota: Quota | None, pairs: Iterable[Pair]) -> None:
        """Admit (and create) the pairs, or raise QuotaExceeded and create nothing."""
        if quota is None or not quota.limits_names:
            return
        now = self._clock()
        known = self._names.get(tenant)
        if known is None or now - known.known_at > KNOWN_SECONDS:
            known = self._names[tenant] = _Names(now)
        todo = sorted({p for p in pairs if not known.has(p)}, key=lambda p: (p[0], p[1] or ""))
        if not todo:
            return
        cap = quota.max_queues
        if cap is not None and known.full is not None and now - known.full_at < self._refresh_s:
            if any(q not in known.full for q, _ in todo):
                raise QuotaExceeded(f"queue limit reached ({cap})")
            if quota.max_partitions_per_queue is None:
                known.pairs.update(todo)  # queues it has, and no cap on their partitions
                known.queue_names.update(q for q, _ in todo)
                return
        await self._count_and_create(tenant, quota, todo, known, now)

    async def _count_and_create(self, tenant: str, quota: Quota, todo: list[Pair],
                                known: _Names, now: float) -> None:
        cap, per_queue = quota.max_queues, quota.max_partitions_per_queue
        async with self._db.transaction() as conn:
            await sql.lock_names(conn, tenant=tenant)
            rows = await sql.names(conn, tenant=tenant,
                                   pairs=[(q, p or "") for q, p in todo])
            queues = rows[0].queues if rows else 0
            new_queues = sorted({r.queue for r in rows if not r.queue_exists})
            if cap is not None and queues + len(new_queues) >= cap:
                known.full = await sql.queue_names(conn, tenant=tenant)
                known.full_at = now
            if cap is not None and queues + len(new_queues) > cap:
                raise QuotaExceeded(f"queue limit reached ({cap})")
            if per_queue is not None:
                adding: dict[str, int] = {}
                existing: dict[str, int] = {}
                for (_, partition), row in zip(todo, rows):
                    existing[row.queue] = row.partitions
                    if partition is not None and not row.partition_exists:
                        adding[row.queue] = adding.get(row.queue, 0) + 1
                for queue, more in adding.items():
                    if existing[queue] + more > per_queue:
                        raise QuotaExceeded(f"partition limit reached ({per_queue})")
            await sql.create_names(
                conn, tenant=tenant,
                queues=[(q, *options.derive_namespace_task(q)) for q in new_queues],
                default_options=options.DEFAULTS_JSON,
                pairs=[(q, p) for q, p in todo if p is not None],
                derive=options.derive_namespace_task)
        if known.full is not None:
            known.full.update(new_queues)
        known.pairs.update(todo)
        known.queue_names.update(q for q, _ in todo)
