"""`Tenants`, the quotas of every tenant as one process applies them (`Broker.tenants`).

Every QUEEN_TENANT_REFRESH_MS a side task re-reads the quota table, the number of live
broker processes (each enforces its share of a tenant's rates: core/tenancy/limiter.py) and
the stored bytes of tenants with a storage quota (two small statements while no tenant has
a storage quota, and none of the answers touch a request's path). That
figure is measured by one process at a time: the first whose refresh finds the last
measurement older than QUEEN_TENANT_USAGE_INTERVAL_MS takes it (a row lock in
`queen.tenant_usage`), so a storage block is set and lifted within about that interval of
the bytes crossing the quota. A database that cannot be read leaves the last state in
force.

The admin routes and the CLI (`queen-broker tenants`) read and change quotas here; a change
applies at once in the process that made it, and in the others at their next refresh.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.errors import ServiceError
from core.storage import tenants as sql
from core.storage.database import Database
from core.tenancy.catalog import Catalog, Pair
from core.tenancy.limiter import Limiter
from core.tenancy.quotas import FIELDS, Quota
from core.tenancy.settings import TenancySettings
from core.waiting import wait_event

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TenantSummary:
    tenant: str
    queues: int
    partitions: int
    quota: Quota | None
    stored_bytes: int | None  # last measured (tenants with a storage quota)


def quota_of(row: sql.QuotaRow) -> Quota:
    return Quota(**{name: getattr(row, name) for name, _ in FIELDS})


def row_of(tenant: str, quota: Quota) -> sql.QuotaRow:
    return sql.QuotaRow(tenant, **{name: getattr(quota, name) for name, _ in FIELDS})


class Tenants:
    def __init__(self, db: Database, settings: TenancySettings, *,
                 live_seconds: float) -> None:
        self._db = db
        self._interval = settings.refresh_ms / 1000
        self._usage_seconds = settings.usage_interval_ms / 1000
        self._live_seconds = live_seconds  # a heartbeat younger than this: a live process
        self.limiter = Limiter()
        self.catalog = Catalog(db, refresh_s=self._interval)
        self._stopping = asyncio.Event()

    def close(self) -> None:
        self._stopping.set()

    async def admit_write(self, tenant: str, pairs: Iterable[Pair],
                          payload_sizes: Sequence[int], *, messages: int | None = None,
                          throttle: bool = False) -> None:
        """The quota checks of a write of `tenant` (its (queue, partition) pairs, the size of
        each message's payload), before anything of it is written: the storage quota (403),
        the batch and payload caps (413), the message rate (429, `messages` or one per
        payload; with `throttle`, waiting for it instead, Kafka's way), then the queue and
        partition caps (403, creating what it admits). A tenant without a quota passes at
        the cost of a dictionary lookup."""
        quota = self.limiter.quota(tenant)
        if quota is None:
            return
        self.limiter.check_storage(tenant)
        self.limiter.check_batch(tenant, payload_sizes)
        count = len(payload_sizes) if messages is None else messages
        if throttle:
            await self.limiter.throttle_messages(tenant, count)
        else:
            self.limiter.admit_messages(tenant, count)
        await self.catalog.admit(tenant, quota, pairs)

    async def admit_names(self, tenant: str, pairs: Iterable[Pair]) -> None:
        """The queue and partition caps alone (a configure, a Kafka topic, a DLQ replay)."""
        await self.catalog.admit(tenant, self.limiter.quota(tenant), pairs)

    async def refresh_forever(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.refresh()
            except ServiceError as exc:
                log.debug("tenant quotas not refreshed, the last ones stay: %r", exc)
            await wait_event(self._stopping, self._interval)

    async def refresh(self) -> None:
        """Read the quotas, the live processes and the tenants' usage; measure the usage
        that is due (see the module docstring)."""
        async with self._db.session() as conn:
            quotas = {r.tenant: quota_of(r) for r in await sql.quotas(conn)}
            processes = await sql.live_processes(conn, seconds=self._live_seconds)
        stored = [t for t, q in quotas.items() if q.max_stored_bytes is not None]
        full: frozenset[str] = frozenset()
        if stored:
            for tenant in stored:
                await self._measure_if_due(tenant)
            async with self._db.session() as conn:
                usage = {u.tenant: u.stored_bytes for u in await sql.usage(conn)}
            full = frozenset(t for t in stored
                             if usage.get(t, 0) >= (quotas[t].max_stored_bytes or 0))
        self.limiter.load(quotas, processes=processes, full=full)

    async def _measure_if_due(self, tenant: str) -> None:
        async with self._db.transaction() as conn:
            if await sql.claim_usage(conn, tenant=tenant, seconds=self._usage_seconds):
                stored = await sql.measure_usage(conn, tenant=tenant)
                await sql.store_usage(conn, tenant=tenant, stored_bytes=stored)

    # -- the admin routes ------------------------------------------------------------------

    async def summaries(self) -> list[TenantSummary]:
        """Every tenant that names something or has a quota."""
        async with self._db.session() as conn:
            quotas = {r.tenant: quota_of(r) for r in await sql.quotas(conn)}
            rows = await sql.tenants(conn)
        return [TenantSummary(r.tenant, r.queues, r.partitions, quotas.get(r.tenant),
                              r.stored_bytes) for r in rows]

    async def summary(self, tenant: str) -> TenantSummary:
        for found in await self.summaries():
            if found.tenant == tenant:
                return found
        return TenantSummary(tenant, 0, 0, None, None)

    async def set_quota(self, tenant: str, quota: Quota) -> None:
        async with self._db.session() as conn:
            await sql.set_quota(conn, row=row_of(tenant, quota))
        self.limiter.set_quota(tenant, quota)

    async def clear_quota(self, tenant: str) -> bool:
        """Remove a tenant's quota; answers whether it had one."""
        async with self._db.session() as conn:
            had = await sql.clear_quota(conn, tenant=tenant)
        self.limiter.set_quota(tenant, None)
        return had
