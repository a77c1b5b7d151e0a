"""The ephemeral sweep (lease expiry, ttl, idle reclaim, VACUUM) on a connection of its own.

Why its own connection and not the worker's pool: the sweep runs every EPHEMERAL_SWEEP_MS
(0.5 s) whether or not anyone uses ephemeral queues, and on the pool its statements took
pool connections and round trips from the requests (a parked long poll's cost, counted by
tests/integration/test_round_trips.py, included them). Why in the web worker and not in the
reaper process: every broker runs web workers (`serve`, `web`, the tests' brokers), while the
reaper is a separate Procfile line a deployment may leave out, and ephemeral leases then never
expired. Each worker runs a `Sweeper`, but only one sweeps deployment-wide: the one whose
connection holds a session advisory lock (`eph_sweeper_claim`). The others hold an idle
connection and try to take the lock every `_CLAIM_SECONDS`; when the sweeper's worker stops or
its connection breaks (a database restart), the lock goes with the connection and the first
to ask again takes over. The lock is a guard of efficiency, not of correctness: a sweep batch
is bounded (`_BATCH` queues per call, `_MAX_BATCHES` calls per pass), takes a transaction
advisory lock too, and running it twice changes nothing.

A failure (database away, statement timeout) is logged, the connection dropped and the pass
tried again after `_RETRY_SECONDS`, so the loop outlives a PostgreSQL restart; anything else is
a bug and ends the worker's side tasks (the worker exits and its supervisor says so).
"""

from __future__ import annotations

import asyncio
import logging
import time

from core.ephemeral.waiters import CHANNEL
from core.errors import ServiceError
from core.settings import Settings
from core.storage import ephemeral as store
from core.storage.database import connect_with_retry
from core.storage.statements import Conn
from core.waiting import wait_event

log = logging.getLogger(__name__)

# Dead row versions of the ephemeral tables are reclaimed this often (see eph_vacuum).
_VACUUM_SECONDS = 2.0
# A worker that is not the sweeper asks for the lock this often (one statement).
_CLAIM_SECONDS = 2.0
# After a failure, the next try (a new connection) waits this long.
_RETRY_SECONDS = 1.0
# Queues per sweep call and calls per pass: one call stays a short transaction, one pass
# stays within its interval; the queues after the last batch are the next pass's first.
_BATCH = 500
_MAX_BATCHES = 20
# One pass (or claim) longer than this is a failure: the connection is dropped.
_PASS_LIMIT_SECONDS = 30.0


class Sweeper:
    def __init__(self, dsn: str, settings: Settings) -> None:
        self._dsn = dsn
        self._settings = settings
        self._idle_seconds = settings.ephemeral_idle_seconds
        self._interval = settings.ephemeral_sweep_ms / 1000
        self._stopping = asyncio.Event()
        self._conn: Conn | None = None
        self._claimed = False
        self._vacuumed = 0.0  # monotonic time of the last VACUUM
        self._after = ""  # where the next pass starts: "" unless the last one was cut short

    def close(self) -> None:
        """Make `run_forever` return (its connection closed, the lock with it)."""
        self._stopping.set()

    async def run_forever(self) -> None:
        try:
            while not self._stopping.is_set():
                pause = await self._turn()
                await wait_event(self._stopping, pause)
        finally:
            self._disconnect()

    async def _turn(self) -> float:
        """Connect if needed, claim the lock if not held, sweep if held; answer the pause
        before the next turn."""
        try:
            async with asyncio.timeout(_PASS_LIMIT_SECONDS):
                if self._conn is None or self._conn.is_closed():
                    self._claimed = False
                    self._conn = await connect_with_retry(self._dsn, self._settings, 0,
                                                          role="sweep")
                if not self._claimed:
                    self._claimed = await store.claim_sweeper(self._conn)
                    if not self._claimed:
                        return _CLAIM_SECONDS
                    log.info("this worker now sweeps the ephemeral queues")
                await self.sweep_pass(self._conn)
        except (ServiceError, TimeoutError) as exc:
            log.warning("ephemeral sweep failed (%s); retrying on a new connection",
                        type(exc).__name__)
            self._disconnect()
            return _RETRY_SECONDS
        return self._interval

    async def sweep_pass(self, conn: Conn) -> None:
        """The queues due, batch by batch (a pass cut short by `_MAX_BATCHES` leaves the rest
        to the next pass, which goes on from there), and the VACUUM when it is due."""
        for _ in range(_MAX_BATCHES):
            row = await store.sweep(conn, idle_seconds=self._idle_seconds, channel=CHANNEL,
                                    after=self._after, limit=_BATCH)
            self._after = row.last_queue or ""
            if not self._after:
                break
        if time.monotonic() - self._vacuumed >= _VACUUM_SECONDS:
            self._vacuumed = time.monotonic()
            await store.vacuum(conn)

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        self._claimed = False
        if conn is not None:
            conn.terminate()  # immediate: it may be stuck in a statement that timed out
