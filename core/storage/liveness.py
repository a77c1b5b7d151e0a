"""A process's watch on the database server it is connected to.

A primary whose PostgreSQL stopped (a frozen or hung machine, SIGSTOP) on a kernel that still
runs looks alive to TCP: the kernel accepts connections and acknowledges every packet, so
the sockets' keepalives and user timeout (core/storage/sockets.py) never fire, and every
statement sent to it waits for the statement timeout meant for slow queries (30 s, and the
driver's 5 s on top). Meanwhile the standby may have been promoted: the broker must go there,
not wait for the old primary (which, cut off for good, may never come back).

So every process that holds a pool (web workers, the reaper) runs one watch: on a connection
of its own it asks the server `SELECT 1` once a second; a question not answered within
DB_SILENCE_TIMEOUT_MS (4 s) makes it `forsake` that server (core/storage/hosts.py): every
connection the process holds to it (pool, LISTEN, NOTIFY, the flushers, the sweeper) is cut,
so statements in flight fail at once as a lost connection and their requests are answered as
an outage (503 with Retry-After, or `buffered` by the push spool), and new connections try
the other hosts first, i.e. the promoted standby as soon as it accepts writes.

Silence is counted only while this process's event loop runs: a loop held up by other work
for seconds would otherwise blame the server for its own delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import asyncpg

from core.errors import ServiceError
from core.storage.errors import DRIVER_ERRORS
from core.storage.hosts import connector_for
from core.storage.statements import Statement

log = logging.getLogger(__name__)

_PROBE = Statement[None]("silence_probe")
ASK_EVERY = 1.0  # seconds between two questions
_TICK = 0.25  # silence is counted in steps of at most this long


class ServerWatch:
    """Asks the server behind `dsn` whether it answers, until `stop`; forsakes it when it
    stays silent for `silence` seconds. `options` are the connect arguments."""

    def __init__(self, dsn: str, silence: float, options: dict[str, Any]) -> None:
        self._connector = connector_for(dsn)
        self._silence = silence
        self._options = options
        self._task: asyncio.Task[None] | None = None
        self.forsaken = 0  # times a silent server was given up on (for tests and logs)

    def start(self) -> None:
        if self._silence > 0 and self._task is None:
            self._task = asyncio.create_task(self._run(), name="database-watch")
            self._task.add_done_callback(_report_crash)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # A crash was logged when it happened: closing the pool must go on.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        conn: asyncpg.Connection | None = None
        try:
            while True:
                if conn is None or conn.is_closed():
                    conn = await self._connect()
                if conn is not None and not await self._answers(conn):
                    cut = self._connector.forsake(conn)
                    self.forsaken += 1
                    log.warning("the database server has not answered for %.1f s: cut %d "
                                "connection(s) to it; trying the other hosts first",
                                self._silence, cut)
                    conn = None
                await asyncio.sleep(ASK_EVERY)
        finally:
            if conn is not None:
                conn.terminate()

    async def _connect(self) -> asyncpg.Connection | None:
        try:
            return await self._connector.connect(**self._options)
        except DRIVER_ERRORS:
            return None  # no server to watch now: the requests find that out themselves

    async def _answers(self, conn: asyncpg.Connection) -> bool:
        """Ask once; False when no answer came in `silence` seconds of running loop. A
        failure other than silence (the connection lost, an error) counts as an answer:
        the connection is dropped and the next question goes on a new one."""
        probe = asyncio.ensure_future(_PROBE.value(conn))
        silent = 0.0
        try:
            while not probe.done():
                if silent >= self._silence:
                    return False
                started = time.monotonic()
                await asyncio.wait({probe}, timeout=_TICK)
                # A loop held up elsewhere adds at most one tick.
                silent += min(time.monotonic() - started, _TICK)
            if probe.exception() is not None:
                conn.terminate()
            return True
        finally:
            if not probe.done():
                probe.cancel()
                with contextlib.suppress(asyncio.CancelledError, ServiceError, *DRIVER_ERRORS):
                    await probe


def _report_crash(task: asyncio.Task[None]) -> None:
    """A watch that ended other than by `stop` is a bug: say so (the process goes on without
    it, its connections still bounded by the sockets' timeouts and the driver's)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("the database watch stopped", exc_info=task.exception())
