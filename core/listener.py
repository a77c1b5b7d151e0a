"""Waking parked long polls: in-process events fed by local commits and by LISTEN.

Each web process holds one LISTEN connection (not a pool connection) on `core.wakeup.CHANNEL`
and one notifier connection. Thousands of parked pops cost one `asyncio.Event` each and no
database connection. A local commit wakes local waiters at once and is announced to the other
processes by NOTIFY; notifications that arrive while one NOTIFY is in flight are merged into
the next, so a burst of pushes costs a handful of NOTIFY statements, not one each.
Missed notifications (e.g. while the LISTEN connection reconnects) are covered by the pop's
own backoff re-check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import asyncpg

from core.db import DRIVER_ERRORS
from core.wakeup import CHANNEL, notify_queues

log = logging.getLogger(__name__)
_RECONNECT_DELAY = 1.0
_ANNOUNCE_GATHER_SECONDS = 0.003


class Waiter:
    """One parked pop: set when any of its queues (or, for `queue_ids=None`, any queue) gets
    something deliverable."""

    def __init__(self, queue_ids: frozenset[int] | None) -> None:
        self.queue_ids = queue_ids
        self.event = asyncio.Event()


class WakeupHub:
    def __init__(self, dsn: str, server_settings: dict[str, str]) -> None:
        self._dsn = dsn
        self._server_settings = server_settings
        self._by_queue: dict[int, set[Waiter]] = {}
        self._any: set[Waiter] = set()
        self._to_announce: set[int] = set()
        self._announce_ready = asyncio.Event()
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.listening = False

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._listen_forever(), name="wakeup-listen"),
            asyncio.create_task(self._announce_forever(), name="wakeup-notify"),
        ]

    async def close(self) -> None:
        self._stopping.set()
        self._announce_ready.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @contextlib.contextmanager
    def parked(self, queue_ids: Iterable[int] | None) -> Iterator[Waiter]:
        """Register a waiter for the duration of the block (register *before* checking for
        messages, so a commit between the check and the wait is not missed)."""
        waiter = Waiter(None if queue_ids is None else frozenset(queue_ids))
        if waiter.queue_ids is None:
            self._any.add(waiter)
        else:
            for q in waiter.queue_ids:
                self._by_queue.setdefault(q, set()).add(waiter)
        try:
            yield waiter
        finally:
            if waiter.queue_ids is None:
                self._any.discard(waiter)
            else:
                for q in waiter.queue_ids:
                    waiters = self._by_queue.get(q)
                    if waiters is not None:
                        waiters.discard(waiter)
                        if not waiters:
                            del self._by_queue[q]

    @property
    def parked_count(self) -> int:
        return len(self._any) + len({w for ws in self._by_queue.values() for w in ws})

    def wake(self, queue_id: int) -> None:
        """Wake this process's waiters of a queue (and every discovery waiter)."""
        for waiter in self._by_queue.get(queue_id, ()):
            waiter.event.set()
        for waiter in self._any:
            waiter.event.set()

    def announce(self, queue_ids: Iterable[int]) -> None:
        """Something became deliverable: wake local waiters now, other processes by NOTIFY."""
        for q in queue_ids:
            self.wake(q)
            self._to_announce.add(q)
        self._announce_ready.set()

    def _on_notification(self, conn: Any, pid: int, channel: str, payload: object) -> None:
        try:
            self.wake(int(str(payload)))
        except ValueError:
            log.warning("ignoring malformed wake-up payload %r", payload)

    async def _listen_forever(self) -> None:
        while not self._stopping.is_set():
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self._dsn, server_settings=self._server_settings)
                await conn.add_listener(CHANNEL, self._on_notification)
                self.listening = True
                # Anything missed while disconnected: let every waiter re-check once.
                for waiters in list(self._by_queue.values()):
                    for waiter in waiters:
                        waiter.event.set()
                while not self._stopping.is_set() and not conn.is_closed():
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._stopping.wait(), 5.0)
            except asyncio.CancelledError:
                raise
            except DRIVER_ERRORS as exc:
                log.info("wake-up listener disconnected (%s); reconnecting", type(exc).__name__)
            finally:
                self.listening = False
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(conn.close(), 2.0)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), _RECONNECT_DELAY)

    async def _announce_forever(self) -> None:
        conn: asyncpg.Connection | None = None
        # NOTIFY needs no durability: without this each one would wait for a WAL flush
        # while holding PostgreSQL's global notify lock.
        settings = {**self._server_settings, "synchronous_commit": "off"}
        while not self._stopping.is_set():
            await self._announce_ready.wait()
            self._announce_ready.clear()
            if not self._to_announce:
                continue
            batch, self._to_announce = self._to_announce, set()
            try:
                if conn is None or conn.is_closed():
                    conn = await asyncpg.connect(self._dsn, server_settings=settings, timeout=2)
                await notify_queues(conn, sorted(batch))
                # Let announcements gather for a moment: one NOTIFY per few milliseconds
                # wakes waiters just as well as one per push, at a fraction of the cost.
                await asyncio.sleep(_ANNOUNCE_GATHER_SECONDS)
            except asyncio.CancelledError:
                raise
            except DRIVER_ERRORS as exc:
                # Other processes fall back on their backoff re-check; try again next time.
                log.info("wake-up notify failed (%s)", type(exc).__name__)
                conn = None
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 2.0)
