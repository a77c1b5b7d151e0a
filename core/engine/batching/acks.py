"""Acks and lease extensions of concurrent requests, one statement per flush.

An ack request (`POST /ack`, `POST /ack/batch`) touches the cursors of its (group,
partition) pairs; requests on disjoint pairs are applied by one `queen.ack` call (the
statement decides per pair, so each request's verdicts are those it would get alone, and
what it applies commits with the flush or not at all). An extension touches the leases of
one lease id; extensions of distinct lease ids are applied by one UPDATE.
Transactions (§4.7) are not batched: they carry pushes and a lease check of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from datetime import datetime

from core.engine import ack as acks
from core.engine.batching.batcher import KeyedBatcher
from core.ids import PartitionId, QueueId
from core.storage import reads as sql
from core.storage.database import Database

AckRequest = Sequence[acks.GroupAck]
Wakes = list[tuple[QueueId, PartitionId]]


class AckFlusher:
    """Applies ack requests in flushes; `on_wakes` hears, once per flush, where spans became
    claimable again."""

    def __init__(self, db: Database, on_wakes: Callable[[Wakes], None], *,
                 max_concurrent: int = 2) -> None:
        self._db = db
        self._on_wakes = on_wakes
        self.batcher: KeyedBatcher[AckRequest, acks.AppliedAcks] = KeyedBatcher(
            self._flush, _ack_keys, len, max_concurrent=max_concurrent)

    async def apply(self, request: AckRequest) -> acks.AppliedAcks:
        return await self.batcher.submit(request)

    async def close(self) -> None:
        await self.batcher.close()

    async def _flush(self, requests: list[AckRequest]) -> list[acks.AppliedAcks]:
        items = [item for request in requests for item in request]
        async with self._db.session() as conn:
            applied = await acks.apply_acks(conn, items)
        self._on_wakes(applied.wakes)
        out: list[acks.AppliedAcks] = []
        at = 0
        for request in requests:
            out.append(acks.AppliedAcks(applied.outcomes[at:at + len(request)]))
            at += len(request)
        return out


def _ack_keys(request: AckRequest) -> frozenset[Hashable]:
    return frozenset((a.group, a.item.partition_id) for a in request)


class ExtendFlusher:
    """Extends the leases of concurrent requests in flushes (one UPDATE per flush)."""

    def __init__(self, db: Database, *, max_concurrent: int = 2) -> None:
        self._db = db
        self.batcher: KeyedBatcher[tuple[str, int, str], list[datetime]] = KeyedBatcher(
            self._flush, lambda r: frozenset([r[0]]), lambda r: 1,
            max_concurrent=max_concurrent)

    async def extend(self, lease_id: str, seconds: int, tenant: str = "") -> list[datetime]:
        """Push the expiry of every live lease of `lease_id` on `tenant`'s queues to at
        least now + seconds; answer the new expiries (empty when nothing was live)."""
        return await self.batcher.submit((lease_id, seconds, tenant))

    async def close(self) -> None:
        await self.batcher.close()

    async def _flush(self, requests: list[tuple[str, int, str]]) -> list[list[datetime]]:
        async with self._db.session() as conn:
            rows = await sql.extend_leases(conn, lease_ids=[r[0] for r in requests],
                                           seconds=[float(r[1]) for r in requests],
                                           tenants=[r[2] for r in requests])
        expiries: dict[str, list[datetime]] = {}
        for row in rows:
            expiries.setdefault(row.lease_id, []).append(row.lease_expires_at)
        return [expiries.get(lease_id, []) for lease_id, _, _ in requests]
