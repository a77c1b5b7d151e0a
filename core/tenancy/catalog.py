"""The caps on a limited tenant's names: how many queues, and partitions per queue.

A write that would create a queue or a partition of a tenant with such a cap (a push, a
transaction, a configure, a timer's destination, a stream's sink, a DLQ replay elsewhere, a
Kafka topic) first goes through `admit`: under a lock of the tenant's names (an advisory
lock in the database, so the count is exact across processes and hosts), it counts what
exists, refuses what would pass a cap (403 quota_exceeded, Queen's texts), and creates the
queues and partitions it admits, so the next count sees them. Pairs a process knows exist
are admitted without asking the database; a new one while the process knows the tenant is
at its queue cap is refused without asking either. What a process knows is trusted for
KNOWN_SECONDS (a queue another process deleted meanwhile may be written again without a
count within that time), its counts for the refresh interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from core.engine import options
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

    counted_at: float  # when `queues` was counted
    queues: int  # the tenant's queues then
    known_at: float  # since when the pairs below are known to exist
    pairs: set[Pair] = field(default_factory=set)
    queue_names: set[str] = field(default_factory=set)

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
        if known is not None and now - known.known_at > KNOWN_SECONDS:
            known = None
        todo = sorted({p for p in pairs if known is None or not known.has(p)},
                      key=lambda p: (p[0], p[1] or ""))
        if not todo:
            return
        cap = quota.max_queues
        if (known is not None and cap is not None and now - known.counted_at < self._refresh_s
                and known.queues >= cap and any(q not in known.queue_names for q, _ in todo)):
            raise QuotaExceeded(f"queue limit reached ({cap})")
        async with self._db.transaction() as conn:
            await sql.lock_names(conn, tenant=tenant)
            rows = await sql.names(conn, tenant=tenant,
                                   pairs=[(q, p or "") for q, p in todo])
            queues = rows[0].queues if rows else 0
            new_queues = sorted({r.queue for r in rows if not r.queue_exists})
            if cap is not None and queues + len(new_queues) > cap:
                self._names[tenant] = _Names(now, queues, now)
                raise QuotaExceeded(f"queue limit reached ({cap})")
            per_queue = quota.max_partitions_per_queue
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
                pairs=[(q, p) for q, p in todo if p is not None])
        entry = self._names.get(tenant)
        if entry is None or entry.known_at < now - KNOWN_SECONDS:
            entry = self._names[tenant] = _Names(now, 0, now)
        entry.counted_at, entry.queues = now, queues + len(new_queues)
        entry.pairs.update(todo)
        entry.queue_names.update(q for q, _ in todo)
