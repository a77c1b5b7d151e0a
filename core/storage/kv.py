"""Typed calls of the KV statements (schema/queries/kv.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.storage.statements import Conn, Statement


@dataclass(frozen=True, slots=True)
class KvRow:
    ns: str
    key: str
    value: str
    version: int
    expires_at: str | None  # wire text (ISO-8601 UTC), as in every row read here
    updated_at: str


@dataclass(frozen=True, slots=True)
class LockedRow(KvRow):
    """A row locked for a write (`kv_lock`): the stored row, and what the lock found."""

    live: bool
    created: bool  # a placeholder this call inserted
    next_version: int  # drawn while the lock is held
    instant: datetime


@dataclass(frozen=True, slots=True)
class PrefixRow:
    key: str
    value: str | None  # None for a keys-only listing
    version: int
    expires_at: str | None
    updated_at: str


@dataclass(frozen=True, slots=True)
class WriteCounts:
    updated: int
    deleted: int


@dataclass(frozen=True, slots=True)
class KvNamespaceRow:
    ns: str
    keys: int
    bytes: int
    expiring: int


@dataclass(frozen=True, slots=True)
class RowWrite:
    ns: str
    key: str
    value: str
    version: int
    expires_at: datetime | None
    keep_expiry: bool


_LOCK = Statement("kv_lock", LockedRow)


async def lock_rows(conn: Conn, *, tenant: str,
                    keys: Sequence[tuple[str, str]]) -> list[LockedRow]:
    """Lock (creating placeholders for) distinct (ns, key) pairs of the tenant's key space,
    in byte order."""
    return await _LOCK.rows(conn, namespaces=[k[0] for k in keys], keys=[k[1] for k in keys],
                            tenant=tenant)


_GET = Statement("kv_get", KvRow)


async def live_rows(conn: Conn, *, tenant: str, keys: Sequence[tuple[str, str]]) -> list[KvRow]:
    return await _GET.rows(conn, namespaces=[k[0] for k in keys], keys=[k[1] for k in keys],
                           tenant=tenant)


_WRITE = Statement("kv_write", WriteCounts)


async def write_rows(conn: Conn, *, tenant: str, writes: Sequence[RowWrite],
                     deletes: Sequence[tuple[str, str]]) -> WriteCounts | None:
    return await _WRITE.one(
        conn, namespaces=[w.ns for w in writes], keys=[w.key for w in writes],
        values=[w.value for w in writes], versions=[w.version for w in writes],
        expiries=[w.expires_at for w in writes], keep=[w.keep_expiry for w in writes],
        deleted_namespaces=[d[0] for d in deletes], deleted_keys=[d[1] for d in deletes],
        tenant=tenant)


_PREFIX = Statement("kv_get_prefix", PrefixRow)


async def prefix_rows(conn: Conn, *, tenant: str, ns: str, prefix: str, upper: str | None,
                      after: str, limit: int, keys_only: bool) -> list[PrefixRow]:
    return await _PREFIX.rows(conn, ns=ns, prefix=prefix, upper=upper, after=after, limit=limit,
                              keys_only=keys_only, tenant=tenant)


_SWEEP = Statement[None]("kv_sweep")


async def sweep(conn: Conn, *, batch: int) -> int:
    """Delete up to `batch` dead rows; answer how many."""
    return await _SWEEP.run(conn, batch=batch)


_NAMESPACES = Statement("kv_namespaces", KvNamespaceRow)


async def namespaces(conn: Conn, *, tenant: str, after: str, limit: int,
                     horizon_seconds: float) -> list[KvNamespaceRow]:
    return await _NAMESPACES.rows(conn, after=after, limit=limit, horizon_seconds=horizon_seconds,
                                  tenant=tenant)
