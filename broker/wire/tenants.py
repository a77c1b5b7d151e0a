"""The tenants' admin routes (docs/security/tenants.md): listing, one tenant, its quota."""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from core.tenancy.quotas import FIELDS, Quota


class TenantPath(msgspec.Struct):
    """A tenant in a path; `_default` names the default tenant."""

    tenant: str


class QuotaBody(msgspec.Struct, forbid_unknown_fields=True):
    """A tenant's quota: each limit a positive number, or null (or absent) for unlimited.
    PUT replaces the whole quota; `queen-broker tenants set` merges with the stored one."""

    requestsPerSecond: float | None | UnsetType = UNSET
    requestBurst: int | None | UnsetType = UNSET
    messagesPerSecond: float | None | UnsetType = UNSET
    messageBurst: int | None | UnsetType = UNSET
    maxPayloadBytes: int | None | UnsetType = UNSET
    maxBatchSize: int | None | UnsetType = UNSET
    maxQueues: int | None | UnsetType = UNSET
    maxPartitionsPerQueue: int | None | UnsetType = UNSET
    maxRetentionSeconds: int | None | UnsetType = UNSET
    maxParkedPops: int | None | UnsetType = UNSET
    maxStoredBytes: int | None | UnsetType = UNSET

    def given(self) -> dict[str, float | int | None]:
        return {wire: value for _, wire in FIELDS
                if not isinstance(value := getattr(self, wire), UnsetType)}


class QuotaOut(msgspec.Struct):
    requestsPerSecond: float | None
    requestBurst: int | None
    messagesPerSecond: float | None
    messageBurst: int | None
    maxPayloadBytes: int | None
    maxBatchSize: int | None
    maxQueues: int | None
    maxPartitionsPerQueue: int | None
    maxRetentionSeconds: int | None
    maxParkedPops: int | None
    maxStoredBytes: int | None

    @classmethod
    def of(cls, quota: Quota) -> QuotaOut:
        return cls(**quota.as_wire())  # type: ignore[arg-type]


class TenantOut(msgspec.Struct):
    tenant: str  # "" for the default tenant
    path: str  # how a path names it (`_default` for the default tenant)
    queues: int
    partitions: int
    storedBytes: int | None  # last measured (tenants with maxStoredBytes)
    quota: QuotaOut | None  # None: unlimited


class TenantList(msgspec.Struct):
    tenants: list[TenantOut]
    # The live broker processes the answering one counts: each enforces that share of a
    # tenant's rates and long-poll cap (core/tenancy/limiter.py).
    processes: int


class QuotaCleared(msgspec.Struct):
    tenant: str
    cleared: bool  # it had a quota
