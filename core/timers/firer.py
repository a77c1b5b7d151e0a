"""The timer firer (§16.4): a task of the reaper process (`python -m core.reaper`), or a
process of its own (`python -m core.timers.firer`, for running it apart or twice).

It runs inside the reaper, not as a fourth child of `serve`, because a process of its own
cost every start (and restart) of the broker one more interpreter importing the core (about
0.7 s of CPU) at the moment the web workers import theirs, on the same cores, so the broker
answered later after a restart on a loaded machine (docs/guide/timers.md), and a
pool, a LISTEN connection and a counter flusher more per broker. Inside the reaper it is a task
of its own on the reaper's event loop: a reaper pass that takes long (a retention pass)
holds one pool connection, not the loop, so a timer does not wait for it.

The loop: sweep (fire batches of up to TIMERS_FIRE_BATCH due timers, one transaction each,
until a batch comes back short), then sleep until the earliest pending timer is due, at most
a second (TIMERS_SWEEP_MS), or until a web process notifies `queen_timers` that it scheduled
a timer due sooner (payload: milliseconds until it is due). Fired messages wake parked pops
through NOTIFY `queen_wakeup`, as a push does. The firer holds no state: killing it loses
nothing (a fire either committed, or its timers are due again), and two at once (or one per
broker on a shared database) never fire a timer twice (core/timers/fire.py).
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import logging
import sys
import time

import uvloop

from core import background
from core.counters import COUNTERS, LATENCY_BOUNDS, bucket_name
from core.engine import encryption
from core.engine.key_check import check_key
from core.engine.listener import WakeupHub
from core.errors import ServiceError
from core.logs import configure_logging
from core.settings import Settings, from_env_or_exit
from core.storage import timers as sql
from core.storage.database import Database
from core.timers.fire import FireReport, fire_due

log = logging.getLogger("queen.timers")

CHANNEL = "queen_timers"  # "a timer is due in <ms>": wakes a sleeping firer early
SWEEP_SECONDS = 1.0  # §16.4: a sweep at least every second
FIRE_BATCH = 1000  # timers per fire transaction
FIRE_CHAINS = 2  # fire transactions in flight at once
POOL_SIZE = FIRE_CHAINS  # connections it holds at once (the sweep's chains, then one)
_FAILURE_PAUSE = 1.0  # after a failed sweep (the database is away)


def count_fired(report: FireReport) -> None:
    """The fire's figures, for /metrics (counted after its commit)."""
    COUNTERS.add("timers_fired", report.fired)
    COUNTERS.add("timers_dead_lettered", report.dead)
    COUNTERS.add("timers_fire_failed", report.failed)
    for lag in report.lags:
        lag = max(0.0, lag)
        COUNTERS.add(bucket_name("timer_lag", bisect.bisect_left(LATENCY_BOUNDS, lag)))
        COUNTERS.add("timer_lag_seconds_count")
        COUNTERS.add("timer_lag_seconds_sum_us", int(lag * 1_000_000))


class Firer:
    """Sweeps due timers on `db` until `stop`; `notified` is the `queen_timers` listener."""

    def __init__(self, db: Database, hub: WakeupHub | None, *, batch: int = FIRE_BATCH,
                 sweep_seconds: float = SWEEP_SECONDS, max_payload_bytes: int) -> None:
        self._db = db
        self._hub = hub
        self._batch = batch
        self._sweep = sweep_seconds
        self._max_payload = max_payload_bytes
        self._woken = asyncio.Event()
        self._planned = 0.0  # monotonic time of the next sweep

    def notified(self, payload: str | None) -> None:
        """A timer is due in `payload` ms (None: the LISTEN connection was re-established,
        and notifications may have been missed: sweep now)."""
        try:
            due = time.monotonic() + max(0.0, float(payload) / 1000) if payload else 0.0
        except ValueError:
            due = 0.0
        if due < self._planned:
            self._planned = due
            self._woken.set()

    async def sweep(self) -> int:
        """Fire batches until one comes back short, FIRE_CHAINS transactions at a time, each
        chain on the destination partitions of its own hash residue (so they never wait for
        one another's partition locks; rows are taken SKIP LOCKED, so two firers never take
        one timer either); answer how many timers were taken."""
        return sum(await asyncio.gather(*(self._chain(i) for i in range(FIRE_CHAINS))))

    async def _chain(self, shard: int) -> int:
        taken = 0
        while True:
            async with self._db.transaction() as conn:
                report = await fire_due(conn, limit=self._batch,
                                        max_payload_bytes=self._max_payload,
                                        shards=FIRE_CHAINS, shard=shard)
            if self._hub is not None and report.wakes:
                self._hub.announce(report.wakes)
            count_fired(report)
            taken += report.taken
            if report.taken < self._batch:
                return taken

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            # Set before the sweep: a notification arriving from now on can only bring the
            # next sweep forward.
            self._planned = time.monotonic() + self._sweep
            try:
                await self.sweep()
                async with self._db.session() as conn:
                    soonest = await sql.next_due(conn)
            except asyncio.CancelledError:
                raise
            except ServiceError as exc:
                log.warning("timer sweep failed, will retry: %s", exc.message)
                soonest = _FAILURE_PAUSE
            if soonest is not None:
                self._planned = min(self._planned, time.monotonic() + max(0.0, soonest))
            while not stop.is_set():
                remaining = self._planned - time.monotonic()
                if remaining <= 0:
                    break
                self._woken.clear()
                await _first(stop, self._woken, remaining)


async def _first(stop: asyncio.Event, woken: asyncio.Event, seconds: float) -> None:
    if stop.is_set() or woken.is_set():
        return
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(woken.wait())]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def prepare(db: Database, hub: WakeupHub, settings: Settings) -> Firer:
    """A firer on `db`, told by `hub`'s LISTEN connection when a timer is due soon.

    A fire opens timers sealed at schedule and seals the segments of encrypted queues; a
    wrong key would dead-letter every sealed timer, so it stops the process instead."""
    encryption.install(settings.encryption_key)
    async with db.session() as conn:
        await check_key(conn, settings.encryption_key)
    firer = Firer(db, hub, batch=settings.timers_fire_batch,
                  sweep_seconds=settings.timers_sweep_ms / 1000,
                  max_payload_bytes=settings.max_body_bytes)
    hub.subscribe(CHANNEL, firer.notified)
    log.info("timer firer running (sweep every %d ms, batches of %d)",
             settings.timers_sweep_ms, settings.timers_fire_batch)
    return firer


def part(settings: Settings) -> background.Part:
    """The firer as a part of a background process (the reaper's, or its own)."""
    async def start(db: Database, hub: WakeupHub) -> background.Run:
        return (await prepare(db, hub, settings)).run
    return start


def main() -> int:
    """The firer alone: a background process with no other part."""
    settings = from_env_or_exit("queen-timers")
    configure_logging(settings.log_level)
    settings = dataclasses.replace(settings, db_pool_size=POOL_SIZE + 1)
    uvloop.run(background.serve(settings, [part(settings)], name="timer firer"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
