"""The ephemeral queue service (§19) that `core.service.Broker` composes as `broker.ephemeral`.

Every verb is one database call on a function of schema/functions/80_ephemeral.sql, on
UNLOGGED tables shared by every worker and broker over the database; this process keeps only
its parked pops (`Waiters`). Lease expiry, ttl and idle reclaim are the sweep's
(core/ephemeral/sweeper.py), on a connection of its own.

A queue is its tenant's: the tables and the wake-ups know it by its name scoped by the tenant
(core/tenancy/scoped.py: the default tenant's names are themselves), so the functions of
80_ephemeral.sql and the sweep are the same for every tenant; what goes out (names in a
listing or a depth) is the name as the tenant knows it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.ephemeral import model
from core.ephemeral.errors import EphemeralQueueNotFound, EphemeralUnavailable, QueueFull
from core.ephemeral.waiters import CHANNEL, Waiters, first_of
from core.errors import QueenError
from core.storage import ephemeral as store
from core.storage.database import Database
from core.storage.ephemeral import TotalsRow as Totals  # what /metrics shows
from core.tenancy.scoped import belongs, scoped, unscoped
from core.tenancy.service import Tenants

__all__ = ["Ephemeral", "Popped", "Totals"]

# A parked pop checks again at least this often: a notification lost while the LISTEN
# connection reconnects must not leave it waiting until its deadline.
_RECHECK_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Popped:
    id: str
    partition: str
    attempts: int
    payload: str  # JSON text as pushed
    bytes: int  # the payload's, as UTF-8 (what the answer's budget counts)


@dataclass(frozen=True, slots=True)
class EphemeralPartitionDepth:
    partition: str
    pending: int
    bytes: int


@dataclass(frozen=True, slots=True)
class EphemeralGroupDepth:
    group: str
    pending: int
    skipped: int


@dataclass(frozen=True, slots=True)
class EphemeralDepth:
    queue: str
    group: str | None
    tier: str
    pending: int
    partitions_pending: int
    bytes: int
    partitions: list[EphemeralPartitionDepth]
    groups: list[EphemeralGroupDepth]


@dataclass(frozen=True, slots=True)
class Listed:
    queue: str
    tier: str
    depth: int
    bytes: int
    partitions: int
    groups: int
    drops: dict[str, int]
    options: model.Options


@dataclass(frozen=True, slots=True)
class _Pending:
    partition: str
    payloads: Sequence[str]
    done: asyncio.Future[store.PushRow]


@dataclass(slots=True)
class _PushLine:
    """The pushes to one queue waiting for this worker's next call, and the task making
    the calls (None when idle)."""

    pending: list[_Pending] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class Ephemeral:
    def __init__(self, db: Database, *, cap_bytes: int, stop_waiting: asyncio.Event,
                 tenants: Tenants, pop_max_bytes: int) -> None:
        self._db = db
        self._tenants = tenants  # quotas: the message rate of pushes, parked pops
        self._cap_bytes = cap_bytes
        # A pop's answer, long poll and window included, keeps within this many payload
        # bytes (at least one message): QUEEN_POP_MAX_BYTES, as the log's pops.
        self._pop_max_bytes = pop_max_bytes
        self._stop_waiting = stop_waiting
        self.waiters = Waiters()
        self._push_lines: dict[str, _PushLine] = {}

    async def push(self, queue: str, partition: str, payloads: Sequence[str], *,
                   tenant: str = "") -> int:
        """All or nothing; answered after its commit. Pushes to one queue that arrive while
        this worker's previous call for it runs go together in the next one (one lock, one
        commit; each still all or nothing, in arrival order): `_PushLine`."""
        if not payloads:
            return 0
        # Queen's proxy holds ephemeral pushes to the message rate alone: they create no
        # queue row and are bounded by EPHEMERAL_MAX_BYTES, not by a storage quota.
        self._tenants.limiter.admit_messages(tenant, len(payloads))
        queue = scoped(tenant, queue)
        line = self._push_lines.get(queue)
        if line is None:
            line = self._push_lines[queue] = _PushLine()
        done: asyncio.Future[store.PushRow] = asyncio.get_running_loop().create_future()
        line.pending.append(_Pending(partition, payloads, done))
        if line.task is None:
            line.task = asyncio.create_task(self._drain(queue, line), name="eph-push")
        row = await done
        if row.status == "full":
            raise QueueFull()
        if row.status == "unavailable":
            raise EphemeralUnavailable("ephemeral storage holds its ceiling of bytes "
                                       f"({self._cap_bytes}); retry later")
        self.waiters.wake(queue)
        return row.pushed

    async def _drain(self, queue: str, line: _PushLine) -> None:
        """Write what the queue's line holds, call after call, until it is empty."""
        batch: list[_Pending] = []
        try:
            while line.pending:
                batch = []
                held = 0
                while line.pending and (not batch or held + len(line.pending[0].payloads)
                                        <= model.MAX_ITEMS):
                    batch.append(line.pending.pop(0))
                    held += len(batch[-1].payloads)
                try:
                    async with self._db.session() as conn:
                        rows = await store.push(
                            conn, queue=queue, partitions=[p.partition for p in batch],
                            counts=[len(p.payloads) for p in batch],
                            payloads=[x for p in batch for x in p.payloads],
                            cap_bytes=self._cap_bytes, channel=CHANNEL)
                except QueenError as exc:  # each push of the call answers the failure
                    for p in batch:
                        if not p.done.done():
                            p.done.set_exception(exc)
                    continue
                for p, row in zip(batch, rows, strict=True):
                    if not p.done.done():
                        p.done.set_result(row)
        finally:
            line.task = None
            for p in batch + line.pending:  # only when cancelled (the process stops)
                if not p.done.done():
                    p.done.set_exception(EphemeralUnavailable("the broker is stopping"))
            line.pending.clear()
            if self._push_lines.get(queue) is line:
                del self._push_lines[queue]

    async def _pop_once(self, queue: str, partition: str | None, group: str, batch: int,
                        auto_ack: bool, spent: int = 0) -> list[Popped]:
        """One call; `spent`: the payload bytes the answer already holds (a long poll's
        earlier calls), so that the whole answer keeps within the budget."""
        async with self._db.session() as conn:
            rows = await store.pop(conn, queue=queue, partition=partition, group=group,
                                   batch=batch, auto_ack=auto_ack,
                                   max_bytes=self._pop_max_bytes, spent=spent)
        return [Popped(model.message_id(r.epoch, r.partition, r.seq), r.partition,
                       r.attempts, r.payload, r.bytes) for r in rows]

    async def pop(self, *, queue: str, partition: str | None, group: str, batch: int,
                  auto_ack: bool, wait: bool, timeout_ms: int,
                  gone: asyncio.Event | None = None, tenant: str = "") -> list[Popped]:
        """Pop now; with `wait`, park until a message comes, `timeout_ms` passes, the client
        is `gone` or the process stops waiting; with a windowBuffer, keep collecting (§19.4)."""
        queue = scoped(tenant, queue)
        if not wait:
            return await self._pop_once(queue, partition, group, batch, auto_ack)
        with self._tenants.limiter.parked(tenant):
            return await self._wait_pop(queue, partition, group, batch, auto_ack,
                                        timeout_ms, gone)

    async def _wait_pop(self, queue: str, partition: str | None, group: str, batch: int,
                        auto_ack: bool, timeout_ms: int,
                        gone: asyncio.Event | None) -> list[Popped]:
        deadline = time.monotonic() + timeout_ms / 1000
        gone = gone or asyncio.Event()
        # Parked before the first look: a commit between that look and the wait must wake it.
        with self.waiters.parked(queue, group) as event:
            got = await self._pop_once(queue, partition, group, batch, auto_ack)
            held = sum(m.bytes for m in got)
            if len(got) >= batch or held >= self._pop_max_bytes:
                self.waiters.pass_on(queue, group)  # there may be more
                return got
            async with self._db.session() as conn:
                options = await store.options(conn, queue=queue)
            windowed = options.window_ms > 0 or options.window_count > 0
            if got and not windowed:
                return got
            want = min(options.window_count or batch, batch)
            first_at = time.monotonic() if got else None
            while True:
                if got and len(got) >= want:
                    if len(got) >= batch:
                        self.waiters.pass_on(queue, group)
                    return got
                until = deadline
                if first_at is not None and options.window_ms > 0:
                    until = min(until, first_at + options.window_ms / 1000)
                now = time.monotonic()
                if now >= until or gone.is_set() or self._stop_waiting.is_set():
                    return got
                await first_of(event, gone, self._stop_waiting,
                               timeout=min(until - now, _RECHECK_SECONDS))
                if gone.is_set():
                    return got
                event.clear()
                more = await self._pop_once(queue, partition, group, batch - len(got),
                                            auto_ack, held)
                held += sum(m.bytes for m in more)
                if more and first_at is None:
                    if not windowed:
                        if len(more) >= batch or held >= self._pop_max_bytes:
                            self.waiters.pass_on(queue, group)
                        return more
                    first_at = time.monotonic()
                got += more
                if held >= self._pop_max_bytes:  # a window that gathered its budget's worth
                    self.waiters.pass_on(queue, group)
                    return got

    async def ack(self, *, queue: str, group: str, acks: Sequence[tuple[str, str | None]],
                  tenant: str = "") -> list[str]:
        """Acks `(id, status)` in order; one outcome each (§19.5)."""
        if not acks:
            return []
        queue = scoped(tenant, queue)
        ids = [model.parse_id(i) for i, _ in acks]
        statuses = [model.ack_status(s) for _, s in acks]
        async with self._db.session() as conn:
            outcomes = await store.ack(
                conn, queue=queue, group=group, epochs=[p.epoch for p in ids],
                partitions=[p.partition for p in ids], seqs=[p.seq for p in ids],
                statuses=statuses, channel=CHANNEL)
        if "redelivered" in outcomes:
            self.waiters.wake(queue)
        return outcomes

    async def configure(self, queue: str, sent: Any, *, tenant: str = "") -> datetime:
        """Declare the queue with the options `sent` (§19.6); answers when it was stored."""
        options = model.options_in_force(sent)
        async with self._db.session() as conn:
            o = options
            stamp = await store.configure(
                conn, queue=scoped(tenant, queue), sent=sent or {}, max_bytes=o.max_bytes,
                max_length=o.max_length, policy=o.policy, ttl_seconds=o.ttl_seconds,
                lease_seconds=o.lease_seconds, retry_limit=o.retry_limit,
                window_ms=o.window_ms, window_count=o.window_count)
        return stamp

    async def reset(self, queue: str, *, tenant: str = "") -> int:
        async with self._db.session() as conn:
            return await store.reset(conn, queue=scoped(tenant, queue))

    async def delete(self, queue: str, *, tenant: str = "") -> store.DeleteRow:
        async with self._db.session() as conn:
            return await store.delete(conn, queue=scoped(tenant, queue))

    async def queues(self, *, tenant: str = "") -> tuple[list[Listed], int]:
        """The tenant's queues by name, and the bytes they hold (`cellBytes`: with a single
        tenant, what the deployment holds)."""
        async with self._db.session() as conn:
            rows = await store.queues(conn, queue=None)
        listed = [_listed(r) for r in rows if belongs(r.queue, tenant)]
        return listed, sum(q.bytes for q in listed)

    async def depth(self, queue: str, group: str | None, *, tenant: str = "") -> EphemeralDepth:
        """§19.7; raises EphemeralQueueNotFound for a queue that does not exist."""
        key = scoped(tenant, queue)
        async with self._db.session() as conn:
            found = await store.queues(conn, queue=key)
            if not found:
                raise EphemeralQueueNotFound(f"ephemeral queue {queue!r} does not exist")
            rings = await store.rings(conn, queue=key)
            backlogs = await store.backlogs(conn, queue=key)
        return _depth(found[0], group, rings, backlogs)

    async def totals(self, *, tenant: str | None = None) -> Totals:
        """Deployment-wide gauges (None), or those of one tenant's queues."""
        if tenant is None:
            async with self._db.session() as conn:
                return await store.totals(conn)
        listed, held = await self.queues(tenant=tenant)
        return Totals(len(listed), sum(q.depth for q in listed), held,
                      sum(q.drops["bounds"] for q in listed),
                      sum(q.drops["ttl"] for q in listed),
                      sum(q.drops["retry"] for q in listed))


def _listed(r: store.EphemeralQueueRow) -> Listed:
    return Listed(unscoped(r.queue)[1], "declared" if r.declared else "implicit", r.depth,
                  r.bytes,
                  r.partitions, r.groups,
                  {"bounds": r.drops_bounds, "ttl": r.drops_ttl, "retry": r.drops_retry},
                  _options(r))


def _options(r: store.EphemeralQueueRow) -> model.Options:
    """The options in force: the declaration's, else the defaults (an implicit queue)."""
    if r.max_bytes is None:
        return model.DEFAULTS
    return model.Options(r.max_bytes, r.max_length or 0, r.policy or "reject",
                         r.ttl_seconds or 0, r.lease_seconds or 0, r.retry_limit or 0,
                         r.window_ms or 0, r.window_count or 0)


def _depth(q: store.EphemeralQueueRow, group: str | None, rings: list[store.RingRow],
           backlogs: list[store.BacklogRow]) -> EphemeralDepth:
    by_part: dict[str, dict[str, int]] = {}
    groups: dict[str, list[int]] = {}
    for b in backlogs:
        by_part.setdefault(b.partition, {})[b.group] = b.pending
        totals = groups.setdefault(b.group, [0, 0])
        totals[0] += b.pending
        totals[1] += b.skipped
    parts = []
    for ring in rings:
        owed = by_part.get(ring.partition, {})
        if group is not None:
            pending = owed.get(group, ring.length)  # an unseen group owes the whole ring
        else:
            named = [n for g, n in owed.items() if g != model.QUEUE_MODE]
            pending = (max(named) if named else owed.get(model.QUEUE_MODE, ring.length))
        parts.append(EphemeralPartitionDepth(ring.partition, pending, ring.bytes))
    return EphemeralDepth(unscoped(q.queue)[1], group, "declared" if q.declared else "implicit",
                 sum(p.pending for p in parts), sum(1 for p in parts if p.pending > 0),
                 q.bytes, parts, [EphemeralGroupDepth(g, n, s) for g, (n, s) in groups.items()])
