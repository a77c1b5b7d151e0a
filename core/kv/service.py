"""The KV service `Broker` composes: KV calls (§14), lock calls (§15), the `kv` transaction
rider (§17) and the operators' namespace listing.

A database outage is answered `kv_unavailable` (503, Retry-After) on the KV and lock routes
(§§14–17 shared rules); inside a transaction it stays the transaction's own storage error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from core.counters import COUNTERS
from core.errors import CodedUnavailable, Refused, ServiceError
from core.kv import lock_ops
from core.kv.engine import Applied, Element, apply_ops
from core.kv.locks import LockService
from core.kv.ops import KvLimits, KvOp, operations_of, parse_ops
from core.kv.rider import KvRider
from core.pages import KeyPage, key_page
from core.storage import kv as store
from core.storage.database import Database
from core.tenancy.service import Tenants

# The dashboard's "expiring soon": live keys whose expiry is within this many seconds.
EXPIRING_SOON_SECONDS = 300.0


class _RolledBack(Exception):
    """Leaves the transaction block so that a lost `required` writes nothing."""


@dataclass(frozen=True, slots=True)
class KvAnswer:
    """`results` (one element per op), or `failure`, the §14.6 body of a lost `required`."""

    results: list[Element]
    failure: Element | None = None


@contextlib.contextmanager
def _unavailable_as_kv() -> Iterator[None]:
    try:
        yield
    except ServiceError as exc:
        raise CodedUnavailable("kv_unavailable", "kv_unavailable", exc.message) from exc


def failure_fields(applied: Applied) -> Element:
    """The fields a lost `required` adds to its answer (§14.6, §17)."""
    lost = applied.lost
    assert lost is not None
    return {"failedIndex": lost.index, "kvReason": lost.reason, "version": lost.version,
            "value": lost.value}


class KvService:
    def __init__(self, db: Database, *, max_keys: int, tenants: Tenants) -> None:
        self._db = db
        self._limits = KvLimits(max_keys=max_keys)
        self._tenants = tenants  # quotas: writes wait while a tenant's storage is full

    async def call(self, body: Any, *, tenant: str = "") -> KvAnswer:
        """One `POST /api/v1/kv` call (or a path route's single op), body as decoded JSON, on
        the tenant's key space."""
        ops = parse_ops(operations_of(body), self._limits)
        if not ops:
            return KvAnswer([])
        if any(op.writes and op.op != "delete" for op in ops):
            self._tenants.limiter.check_storage(tenant)
        with _unavailable_as_kv():
            applied = await self._apply(ops, tenant)
        _count(ops, applied)
        if applied.lost is not None:
            return KvAnswer([], {"ok": False, "reason": "kv_precondition",
                                 **failure_fields(applied)})
        return KvAnswer(applied.elements)

    async def _apply(self, ops: list[KvOp], tenant: str) -> Applied:
        if all(op.op == "get" for op in ops) or (len(ops) == 1 and ops[0].op != "check"
                                                 and not ops[0].writes):
            # One read statement: its own snapshot and instant, no transaction to open.
            async with self._db.session() as conn:
                read = await apply_ops(conn, ops, lock=False, tenant=tenant)
            assert read is not None  # nothing to write
            return read
        if all(_may_lose(op) for op in ops if op.writes):
            # Every write is conditional, so the call may well write nothing (an acquire of
            # a held lock, a counter at its bound): decide it on an unlocked read first,
            # and take locks only when something applies.
            async with self._db.session() as conn:
                preview = await apply_ops(conn, ops, lock=False, tenant=tenant)
            if preview is not None:
                return preview
        applied = Applied()
        with contextlib.suppress(_RolledBack):
            async with self._db.transaction() as conn:
                locked = await apply_ops(conn, ops, tenant=tenant)
                assert locked is not None
                applied = locked
                if applied.lost is not None:
                    raise _RolledBack
        return applied

    async def _apply_counted(self, ops: list[KvOp], tenant: str) -> Applied:
        applied = await self._apply(ops, tenant)
        _count(ops, applied)
        return applied

    async def locks(self, body: Any, *, tenant: str = "") -> list[Element]:
        """One `POST /api/v1/locks` call: independent ops, one answer each (§15), on the
        tenant's locks (KV rows of its key space)."""
        ops = lock_ops.parse_lock_ops(lock_ops.operations_of(body))
        answers: list[Element] = []
        service = LockService(lambda kv_ops: self._apply_counted(kv_ops, tenant))
        with _unavailable_as_kv():
            for op in ops:
                answer, granted = await service.run(op)
                if granted is not None:
                    COUNTERS.add("lock_grants" if granted else "lock_refusals")
                answers.append(answer)
        return answers

    def rider(self, raw: Any, *, tenant: str = "") -> KvRider:
        """The `kv` rider of a transaction of the tenant, checked now (§17: as §14.4, with
        its caps)."""
        if not isinstance(raw, list):
            raise Refused("kv_bad_request", "kv_bad_body", "kv must be an array")
        return KvRider(parse_ops(raw, KvLimits.rider()), tenant)

    async def namespaces(self, *, after: str, limit: int, tenant: str = ""
                         ) -> KeyPage[store.KvNamespaceRow]:
        with _unavailable_as_kv():
            async with self._db.session() as conn:
                rows = await store.namespaces(conn, tenant=tenant, after=after,
                                              limit=limit + 1,
                                              horizon_seconds=EXPIRING_SOON_SECONDS)
        return key_page(rows, limit, lambda r: r.ns)


def _may_lose(op: KvOp) -> bool:
    """Whether a write has a precondition that can refuse it (an unconditional put cannot;
    an incr without bounds loses only to a non-numeric value)."""
    if op.op == "incr":
        return op.low is not None or op.high is not None
    return op.expect is not None or op.op == "delete"


def _count(ops: Sequence[KvOp], applied: Applied) -> None:
    COUNTERS.add("kv_ops", len(ops))
    COUNTERS.add("kv_writes", applied.writes)
    COUNTERS.add("kv_reads", applied.reads)


async def sweep(db: Database, *, batch: int, max_batches: int = 10) -> int:
    """Delete dead KV rows (expired, placeholders) in batches of `batch`, at most
    `max_batches` per pass; answer how many. Safe beside writers and a second sweeper."""
    total = 0
    for _ in range(max_batches):
        async with db.session() as conn:
            removed = await store.sweep(conn, batch=batch)
        total += removed
        if removed < batch:
            break
    return total
