"""Acks and lease extensions of concurrent requests, one statement per flush.

An ack request (`POST /ack`, `POST /ack/batch`) touches the cursors of its (group,
partition) pairs; requests on disjoint pairs are applied by one `queen.ack` call (the
statement decides per pair, so each request's verdicts are those it would get alone, and
what it applies commits with the flush or not at all). An extension touches the leases of
one lease id; extensions of distinct lease ids are applied by one statement.

On Citus a flush is one call per shard (core/storage/shards.py): the requests whose items
all live on one shard are applied together on that shard's node; a request spanning shards
is applied by a call of its own, atomically (Citus commits it on every node it wrote, in two
phases). A pop of one partition is acknowledged on one shard; an ack of what a pop of several
partitions delivered spans their shards, and pays that commit in two phases (the hot path's
pops of one partition do not). Extensions go to the shard their lease id names; one that finds nothing
there (a lease minted before, or elsewhere) searches every shard.
Transactions (§4.7) are not batched: they carry pushes and a lease check of their own.

A flush whose every request acknowledges a whole delivery this process answered
(core/engine/ack_spans.py) is applied by `queen.ack_spans` instead, on one PostgreSQL; when
that statement finds a span it cannot apply (it then writes nothing), or any request is
not such an ack, the flush takes the general path whole, so each flush is still applied by
one statement that writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from datetime import datetime

from core.engine import ack as acks
from core.engine import ack_spans
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
                 max_concurrent: int = 2,
                 deliveries: ack_spans.Deliveries | None = None) -> None:
        self._db = db
        self._on_wakes = on_wakes
        # What this process's pops delivered (None: every ack takes the general path).
        self.deliveries = deliveries
        self.batcher: KeyedBatcher[AckRequest, acks.AppliedAcks] = KeyedBatcher(
            self._flush, _ack_keys, len, max_concurrent=max_concurrent)

    async def apply(self, request: AckRequest) -> acks.AppliedAcks:
        return await self.batcher.submit(request)

    async def close(self) -> None:
        await self.batcher.close()

    async def _flush(self, requests: list[AckRequest]) -> list[acks.AppliedAcks]:
        shards = self._db.shards
        if not shards.distributed:
            if self.deliveries is not None:
                whole = await self._apply_whole(requests)
                if whole is not None:
                    return whole
            return await self._apply(requests, None)
        calls: dict[int, list[int]] = {}  # route (negative: none) -> positions of requests
        for at, request in enumerate(requests):
            owners = {shards.shard_of(pid) for a in request
                      if (pid := acks.partition_id_of(a.item.partition_id)) is not None}
            route = shards.route(owners.pop()) if len(owners) == 1 else None
            # A request spanning shards is a call of its own (atomic across them).
            calls.setdefault(route if route is not None else -1 - at, []).append(at)
        out: list[acks.AppliedAcks | None] = [None] * len(requests)

        async def call(key: int, positions: list[int]) -> None:
            route = key if key >= 0 else None
            for at, result in zip(positions, await self._apply(
                    [requests[i] for i in positions], route)):
                out[at] = result

        await asyncio.gather(*(call(k, v) for k, v in calls.items()))
        return [r if r is not None else acks.AppliedAcks([]) for r in out]

    async def _apply_whole(self, requests: list[AckRequest]
                           ) -> list[acks.AppliedAcks] | None:
        """The flush by `queen.ack_spans` when every request acknowledges a whole delivery
        and the statement applies them all; None: it wrote nothing."""
        assert self.deliveries is not None
        matched: list[ack_spans.WholeAck] = []
        for request in requests:
            whole = self.deliveries.match(request)
            if whole is None:
                return None
            matched.append(whole)
        spans = [(m.lease_id, m.delivery.group, span) for m in matched
                 for span in m.delivery.spans]
        async with self._db.session() as conn:
            rows = await sql.ack_spans(
                conn, groups=[group for _, group, _ in spans],
                partition_ids=[span.partition_id for _, _, span in spans],
                lease_ids=[lease for lease, _, _ in spans],
                starts=[span.start for _, _, span in spans],
                ends=[span.end for _, _, span in spans],
                tenants=["" for _ in spans])
        if not all(row.applied for row in rows):
            return None
        wakes: Wakes = []
        for row in rows:
            if row.wake:
                assert row.queue_id is not None
                wakes.append((QueueId(row.queue_id),
                              PartitionId(spans[row.idx - 1][2].partition_id)))
        for whole in matched:  # the leases are released: nothing more to match
            self.deliveries.forget(whole.lease_id)
        self._on_wakes(wakes)
        return [acks.AppliedAcks([ack_spans.WHOLE] * len(request)) for request in requests]

    async def _apply(self, requests: list[AckRequest], route: int | None
                     ) -> list[acks.AppliedAcks]:
        items = [item for request in requests for item in request]
        # A call spanning shards (no route) runs where it lands: on the node of its first
        # item's shard, the statements of the items there run without a remote call.
        near = route
        if near is None and self._db.shards.distributed and items and (
                first := acks.partition_id_of(items[0].item.partition_id)) is not None:
            near = self._db.shards.route_of(first)
        async with self._db.session(near) as conn:
            applied = await acks.apply_acks(conn, items, route=route)
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
        shards = self._db.shards
        asked = {lease_id: (seconds, tenant) for lease_id, seconds, tenant in requests}
        by_route: dict[int | None, list[str]] = {}
        for lease_id, _, _ in requests:
            by_route.setdefault(shards.route_of_lease(lease_id), []).append(lease_id)
        expiries: dict[str, list[datetime]] = {}
        # The shards their ids name, then the other shards those answer (a lease of a pop
        # that spanned shards), each once.
        done: set[int | None] = set()
        while by_route:
            route, leases = by_route.popitem()
            done.add(route)
            more = await self._extend(route, leases, asked, expiries)
            for lease_id, routes in more:
                for other in routes:
                    if other not in done:
                        by_route.setdefault(other, []).append(lease_id)
        # Found nowhere it was looked for: minted before, or by a pop that named no
        # candidate (a partition pop of a partition this process did not know).
        lost = [lease_id for lease_id, _, _ in requests if lease_id not in expiries]
        if lost and shards.distributed:
            await self._extend(None, lost, asked, expiries)
        return [expiries.get(lease_id, []) for lease_id, _, _ in requests]

    async def _extend(self, route: int | None, leases: list[str],
                      asked: dict[str, tuple[int, str]],
                      expiries: dict[str, list[datetime]]) -> list[tuple[str, list[int]]]:
        """Extend on one shard (all of them: None); answer the leases with parts on others
        and those others' routes."""
        async with self._db.session(route) as conn:
            rows = await sql.extend_leases(
                conn, route=route, lease_ids=leases,
                seconds=[float(asked[lease][0]) for lease in leases],
                tenants=[asked[lease][1] for lease in leases])
        more: list[tuple[str, list[int]]] = []
        for row in rows:
            if row.lease_expires_at is not None:
                expiries.setdefault(row.lease_id, []).append(row.lease_expires_at)
            if row.routes:
                more.append((row.lease_id, row.routes))
        return more
