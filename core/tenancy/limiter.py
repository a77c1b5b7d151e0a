"""One process's enforcement of the tenants' quotas: checked in memory, before any database
work, so a tenant over its limits costs the others nothing but the check.

Rates hold across processes and hosts by shares: each of the N broker processes serving
requests (counted from their heartbeats in the database, re-read every
QUEEN_TENANT_REFRESH_MS by core/tenancy/service.py) gives a tenant 1/N of its rate and of its
burst (a burst of at least one request). The deployment then admits the tenant's rate when
its traffic reaches the processes evenly, as a pool of connections spread over workers and
hosts does; a tenant whose traffic reaches k of the N processes gets k/N of it (never more
than its rate). The long-poll cap is shared the same way, each process allowing its share
rounded up: up to N - 1 more than the cap across the deployment. Until the count of
processes catches up with one that started or stopped (a refresh interval plus a heartbeat
interval), the shares are those of the old count.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from core.errors import QuotaExceeded, QuotaTooLarge, RateLimited, StorageQuotaExceeded
from core.holders import holding
from core.tenancy.buckets import TokenBucket, retry_after
from core.tenancy.quotas import Quota

PARKED_RETRY_AFTER_S = 5  # as Queen's proxy answers an over-cap parked pop
# The options whose seconds the retention ceiling bounds (0 or absent: the rule is off).
RETENTION_OPTIONS = ("retentionSeconds", "completedRetentionSeconds")


class Limiter:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._quotas: dict[str, Quota] = {}
        self._processes = 1
        self._full: frozenset[str] = frozenset()  # tenants at their storage quota
        self._requests: dict[str, TokenBucket] = {}
        self._messages: dict[str, TokenBucket] = {}
        self._parked: dict[str, int] = {}

    # -- what the refresh tells it --------------------------------------------------------

    def load(self, quotas: Mapping[str, Quota], *, processes: int,
             full: frozenset[str]) -> None:
        """The quotas as stored, the broker processes sharing them, and the tenants whose
        storage quota is reached."""
        self._quotas = dict(quotas)
        self._processes = max(processes, 1)
        self._full = full
        self._reshape()

    def set_quota(self, tenant: str, quota: Quota | None) -> None:
        """A quota this process just stored (the others read it at their next refresh)."""
        if quota is None:
            self._quotas.pop(tenant, None)
        else:
            self._quotas[tenant] = quota
        self._reshape()

    @property
    def processes(self) -> int:
        return self._processes

    def quota(self, tenant: str) -> Quota | None:
        return self._quotas.get(tenant)

    # -- the checks -----------------------------------------------------------------------

    def admit_request(self, tenant: str) -> None:
        """Take one request token; RateLimited (429) when the tenant is over its rate."""
        quota = self._quotas.get(tenant)
        if quota is None or quota.requests_per_second is None:
            return
        self._take(self._requests, tenant, quota.requests_per_second, quota.request_burst, 1,
                   "request rate limit exceeded")

    def admit_messages(self, tenant: str, count: int) -> None:
        """Take `count` message tokens (messages written); RateLimited when over."""
        quota = self._quotas.get(tenant)
        if count <= 0 or quota is None or quota.messages_per_second is None:
            return
        self._take(self._messages, tenant, quota.messages_per_second, quota.message_burst,
                   count, "message rate limit exceeded")

    async def throttle_request(self, tenant: str) -> None:
        """Wait until the tenant's request rate admits one more (Kafka's way: a quota
        delays a client instead of failing its request)."""
        await self._wait(self.admit_request, tenant)

    async def throttle_messages(self, tenant: str, count: int) -> None:
        """Wait until the tenant's message rate admits `count` more."""
        await self._wait(lambda t: self.admit_messages(t, count), tenant)

    async def _wait(self, admit: Callable[[str], None], tenant: str) -> None:
        while True:
            try:
                admit(tenant)
                return
            except RateLimited as limited:
                await asyncio.sleep(limited.wait_seconds)

    def check_batch(self, tenant: str, payload_sizes: Sequence[int]) -> None:
        """The batch and payload caps of one write (413 payload_too_large)."""
        quota = self._quotas.get(tenant)
        if quota is None:
            return
        cap = quota.max_batch_size
        if cap is not None and len(payload_sizes) > cap:
            raise QuotaTooLarge(f"batch of {len(payload_sizes)} items exceeds maxBatchSize "
                                f"({cap})")
        cap = quota.max_payload_bytes
        if cap is not None:
            for i, size in enumerate(payload_sizes):
                if size > cap:
                    raise QuotaTooLarge(f"item {i}: payload {size} bytes exceeds "
                                        f"maxPayloadBytes ({cap})")

    def check_storage(self, tenant: str) -> None:
        """403 storage_quota_exceeded while the tenant's stored bytes are at its quota (it
        lifts at the first measurement below it: core/tenancy/service.py)."""
        if tenant in self._full:
            raise StorageQuotaExceeded()

    def check_retention(self, tenant: str, given: Mapping[str, Any]) -> None:
        """Options asking to keep data longer than the tenant's ceiling are refused (403),
        as Queen's proxy refuses them: a shorter retention than asked would lose data
        silently later."""
        quota = self._quotas.get(tenant)
        ceiling = None if quota is None else quota.max_retention_seconds
        if ceiling is None:
            return
        for key in RETENTION_OPTIONS:
            value = given.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > ceiling:
                raise QuotaExceeded(f"{key} of {value}s exceeds the tenant's "
                                    f"maxRetentionSeconds ({ceiling}s)")

    @contextlib.contextmanager
    def parked(self, tenant: str) -> Iterator[None]:
        """Hold one of the tenant's long-poll places on this process while parked; 429
        (Retry-After 5) when its share is taken."""
        quota = self._quotas.get(tenant)
        cap = None if quota is None else quota.max_parked_pops
        held = self._parked.get(tenant, 0)
        if cap is not None and held >= math.ceil(cap / self._processes):
            raise RateLimited("too many parked consumers", retry_after_seconds=PARKED_RETRY_AFTER_S)
        with holding(self._parked, tenant):
            yield

    def parked_count(self, tenant: str) -> int:
        return self._parked.get(tenant, 0)

    # -- buckets --------------------------------------------------------------------------

    def _share(self, rate: float, burst: int | None) -> tuple[float, float]:
        """This process's rate and capacity of a tenant's (rate, burst): Queen's default
        burst is twice the rate."""
        capacity = float(burst) if burst is not None else 2 * rate
        return rate / self._processes, max(capacity / self._processes, 1.0)

    def _take(self, buckets: dict[str, TokenBucket], tenant: str, rate: float,
              burst: int | None, count: int, text: str) -> None:
        bucket = buckets.get(tenant)
        if bucket is None:
            bucket = buckets[tenant] = TokenBucket(*self._share(rate, burst), clock=self._clock)
        wait = bucket.take(count)
        if wait > 0:
            limited = RateLimited(text, retry_after_seconds=retry_after(wait))
            limited.wait_seconds = wait
            raise limited

    def _reshape(self) -> None:
        for buckets, rate_name, burst_name in (
                (self._requests, "requests_per_second", "request_burst"),
                (self._messages, "messages_per_second", "message_burst")):
            for tenant in list(buckets):
                quota = self._quotas.get(tenant)
                rate: float | None = getattr(quota, rate_name, None)
                if quota is None or rate is None:
                    del buckets[tenant]
                else:
                    buckets[tenant].reshape(*self._share(rate, getattr(quota, burst_name)))
