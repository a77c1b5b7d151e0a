"""Typed calls of the tenant statements (schema/queries/tenants.sql)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from core.storage.statements import Conn, Statement


@dataclass(frozen=True, slots=True)
class QuotaRow:
    tenant: str
    requests_per_second: float | None
    request_burst: int | None
    messages_per_second: float | None
    message_burst: int | None
    max_payload_bytes: int | None
    max_batch_size: int | None
    max_queues: int | None
    max_partitions_per_queue: int | None
    max_retention_seconds: int | None
    max_parked_pops: int | None
    max_stored_bytes: int | None


@dataclass(frozen=True, slots=True)
class TenantRow:
    tenant: str
    queues: int
    partitions: int
    limited: bool  # has a quota
    stored_bytes: int | None  # last measured (tenants with a storage quota)


@dataclass(frozen=True, slots=True)
class UsageRow:
    tenant: str
    stored_bytes: int


@dataclass(frozen=True, slots=True)
class NameRow:
    """What creating one (queue, partition) of a tenant would add."""

    queue: str
    partition: str
    queue_exists: bool
    partition_exists: bool
    partitions: int  # the queue's partitions now
    queues: int  # the tenant's queues now


_QUOTAS = Statement("tenant_quotas", QuotaRow)


async def quotas(conn: Conn) -> list[QuotaRow]:
    return await _QUOTAS.rows(conn)


_QUOTA_SET = Statement[None]("tenant_quota_set")


async def set_quota(conn: Conn, *, row: QuotaRow) -> None:
    """Store a tenant's quota: the row's fields are the statement's parameters."""
    await _QUOTA_SET.run(conn, **asdict(row))


_QUOTA_CLEAR = Statement[None]("tenant_quota_clear")


async def clear_quota(conn: Conn, *, tenant: str) -> bool:
    return await _QUOTA_CLEAR.value(conn, tenant=tenant) is not None


_LIST = Statement("tenant_list", TenantRow)


async def tenants(conn: Conn) -> list[TenantRow]:
    return await _LIST.rows(conn)


_LIVE = Statement[None]("tenant_live_processes")


async def live_processes(conn: Conn, *, seconds: float) -> int:
    return int(await _LIVE.value(conn, seconds=seconds))


_USAGE = Statement("tenant_usage", UsageRow)


async def usage(conn: Conn) -> list[UsageRow]:
    return await _USAGE.rows(conn)


_USAGE_CLAIM = Statement[None]("tenant_usage_claim")


async def claim_usage(conn: Conn, *, tenant: str, seconds: float) -> bool:
    """Whether this caller measures the tenant now (in its open transaction)."""
    return await _USAGE_CLAIM.value(conn, tenant=tenant, seconds=seconds) is not None


_USAGE_MEASURE = Statement[None]("tenant_usage_measure")


async def measure_usage(conn: Conn, *, tenant: str) -> int:
    return int(await _USAGE_MEASURE.value(conn, tenant=tenant))


_USAGE_STORE = Statement[None]("tenant_usage_store")


async def store_usage(conn: Conn, *, tenant: str, stored_bytes: int) -> None:
    await _USAGE_STORE.run(conn, tenant=tenant, stored_bytes=stored_bytes)


_NAMES_LOCK = Statement[None]("tenant_names_lock")


async def lock_names(conn: Conn, *, tenant: str) -> None:
    await _NAMES_LOCK.value(conn, tenant=tenant)


_NAMES = Statement("tenant_names", NameRow)


async def names(conn: Conn, *, tenant: str,
                pairs: Sequence[tuple[str, str]]) -> list[NameRow]:
    return await _NAMES.rows(conn, tenant=tenant, queues=[q for q, _ in pairs],
                             partitions=[p for _, p in pairs])


_NAMES_CREATE = Statement[None]("tenant_names_create")
_NAMES_CREATE_PARTITIONS = Statement[None]("tenant_names_create_partitions")


async def create_names(conn: Conn, *, tenant: str, queues: Sequence[tuple[str, str, str]],
                       default_options: str, pairs: Sequence[tuple[str, str]],
                       derive: Callable[[str], tuple[str, str]]) -> None:
    """Create `queues` ((name, namespace, task)) and the partitions `pairs` ((queue,
    partition)) of a tenant, leaving what exists as it is (in the caller's transaction);
    `derive` gives the namespace and task of a queue a partition needs and `queues` lacks."""
    await _NAMES_CREATE.run(conn, tenant=tenant, queues=[q[0] for q in queues],
                            namespaces=[q[1] for q in queues], tasks=[q[2] for q in queues],
                            default_options=default_options)
    if not pairs:
        return
    shapes = {name: (namespace, task) for name, namespace, task in queues}
    ordered = sorted(set(pairs))  # the order every writer creates partitions in
    kinds = [shapes.get(q) or derive(q) for q, _ in ordered]
    await _NAMES_CREATE_PARTITIONS.run(conn, tenants=[tenant] * len(ordered),
                                       queues=[q for q, _ in ordered],
                                       partitions=[p for _, p in ordered],
                                       namespaces=[k[0] for k in kinds],
                                       tasks=[k[1] for k in kinds], default_options=default_options)


_QUEUE_NAMES = Statement[None]("tenant_queue_names")


async def queue_names(conn: Conn, *, tenant: str) -> set[str]:
    return {str(v) for v in await _QUEUE_NAMES.values(conn, tenant=tenant)}
