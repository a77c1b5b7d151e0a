"""`Timers`: the timer routes' service (§16.2, §16.3), composed by `core.service.Broker`.

Each call is one transaction at one instant (the database's `now()`). After the commit, a
schedule due before the firer's next planned sweep (within a sweep interval) wakes the
firer in whatever process it runs, by NOTIFY `queen_timers`; that notification is its own
statement after the commit, like the wake-ups of pushes (core/engine/wakeup.py says why).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from core.counters import COUNTERS
from core.errors import CodedUnavailable, Refused, ServiceError, StorageUnavailable
from core.pages import KeyPage, key_page
from core.settings import Settings
from core.storage import notify
from core.storage import timers as sql
from core.storage.database import Database
from core.tenancy.service import Tenants
from core.timers.apply import Element, apply_timer_ops
from core.timers.firer import CHANNEL
from core.timers.ops import BAD, RIDER_LIMITS, TimerLimits, TimerOp, operations_of, parse_ops
from core.timers.rider import TimerRider

MAX_PREFIX_BYTES = 128
TimerRow = sql.TimerRow  # what peek and list answer (the edge imports no storage module)


@contextmanager
def _unavailable() -> Iterator[None]:
    """A database outage answers 503 `timers_unavailable` (shared rules of §§14–17)."""
    try:
        yield
    except StorageUnavailable as exc:
        raise CodedUnavailable("timers_unavailable", "timers_unavailable", exc.message) from exc


class Timers:
    def __init__(self, db: Database, settings: Settings, tenants: Tenants) -> None:
        self._db = db
        self._tenants = tenants  # quotas: a schedule is a message written later
        self._limits = TimerLimits(horizon_ms=settings.timers_horizon_ms)
        self._sweep_ms = settings.timers_sweep_ms

    def parse(self, body: Any) -> list[TimerOp]:
        """A `POST /api/v1/timers` body's ops, validated (Refused when it is not sound)."""
        return parse_ops(operations_of(body), self._limits)

    async def call(self, body: Any, producer_sub: str | None, *,
                   tenant: str = "") -> list[Element]:
        """`POST /api/v1/timers`: the body as decoded JSON; the results in input order."""
        return await self.apply(self.parse(body), producer_sub, tenant=tenant)

    async def cancel(self, queue: str, key: str, txn: str | None, *,
                     tenant: str = "") -> Element:
        """The DELETE route: a one-op cancel answering the bare element."""
        op = {"op": "cancel", "queue": queue, "timerKey": key}
        if txn is not None:
            op["txn"] = txn
        [element] = await self.apply(parse_ops([op], self._limits), None, tenant=tenant)
        return element

    async def apply(self, ops: list[TimerOp], producer_sub: str | None, *,
                    tenant: str = "") -> list[Element]:
        """Apply validated ops (`parse`) to the tenant's timers in a transaction of their own."""
        if not ops:
            return []
        schedules = [op for op in ops if op.kind == "schedule"]
        if schedules:
            # A schedule writes its message when it fires: the tenant's storage quota, its
            # payload and batch caps, its message rate and its queue caps apply now.
            await self._tenants.admit_write(tenant, {(op.queue, op.partition)
                                                     for op in schedules},
                                            [len(op.payload) for op in schedules])
        with _unavailable():
            async with self._db.transaction() as conn:
                applied = await apply_timer_ops(conn, ops, now=None, producer_sub=producer_sub,
                                                tenant=tenant)
            COUNTERS.add("timers_scheduled", applied.scheduled)
            COUNTERS.add("timers_cancelled", applied.cancelled)
            await self._wake_if_soon(applied.soonest_delay_ms)
        return applied.results

    def rider(self, raw: Any, producer_sub: str | None, *, tenant: str = "") -> TimerRider:
        """The `timers` rider of a transaction of the tenant, checked now (§17: as §16.2,
        without the op cap, the payload ceiling and the horizon)."""
        if not isinstance(raw, list):
            raise Refused(BAD, "timers_bad_body", "timers must be an array of timer ops")
        return TimerRider(parse_ops(raw, RIDER_LIMITS, "timers"), producer_sub, tenant)

    async def committed(self, rider: TimerRider) -> None:
        """After a bundle carrying `rider` committed: wake the firer as a call would."""
        await self._wake_if_soon(rider.applied.soonest_delay_ms)

    async def _wake_if_soon(self, soonest: int | None) -> None:
        """Committed schedules, the soonest due in `soonest` ms: one due before the firer's
        next sweep wakes it."""
        if soonest is not None and soonest < self._sweep_ms:
            try:
                await self.wake_firer(soonest)
            except ServiceError:
                pass  # committed already; the firer's own sweep finds it within a second

    async def wake_firer(self, due_in_ms: int) -> None:
        """Tell the firer (any process) a timer is due in `due_in_ms`; for a caller that
        committed timer ops in a transaction of its own (the §17 rider)."""
        async with self._db.session() as conn:
            await notify.notify_wakeups(conn, channel=CHANNEL, payloads=[str(max(0, due_in_ms))])

    async def peek(self, queue: str, key: str, *, tenant: str = "") -> TimerRow | None:
        with _unavailable():
            async with self._db.session() as conn:
                return await sql.peek(conn, tenant=tenant, queue=queue, key=key)

    async def page(self, queue: str, *, after: str, limit: int, tenant: str = ""
                   ) -> KeyPage[TimerRow]:
        with _unavailable():
            async with self._db.session() as conn:
                rows = await sql.page(conn, tenant=tenant, queue=queue, after=after,
                                      rows=limit + 1)
        return key_page(rows, limit, lambda r: r.timer_key)

    async def count(self, queue: str, prefix: str, *, tenant: str = "") -> int:
        if not prefix or len(prefix.encode()) > MAX_PREFIX_BYTES or "\x00" in prefix:
            raise Refused(BAD, "timers_bad_prefix", "prefix must be 1 to "
                          f"{MAX_PREFIX_BYTES} bytes without NUL")
        with _unavailable():
            async with self._db.session() as conn:
                return await sql.count(conn, tenant=tenant, queue=queue, prefix=prefix)

    async def queues(self, *, after: str, limit: int, tenant: str = ""
                     ) -> KeyPage[sql.QueueTimers]:
        """The tenant's queues with pending timers (the dashboard's list), in byte order of
        name."""
        with _unavailable():
            async with self._db.session() as conn:
                rows = await sql.queues(conn, tenant=tenant, after=after, rows=limit + 1)
        return key_page(rows, limit, lambda r: r.queue)
