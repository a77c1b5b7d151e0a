"""The shell of the broker's background processes: the reaper (`python -m core.reaper`) and
the timer firer run alone (`python -m core.timers.firer`).

A process runs a few parts (the reaper's maintenance loop, the timer firer) until SIGTERM or
SIGINT, over one Database (waited for: the process may start before PostgreSQL, and a stop
signal during the wait ends it at once) and one wake-up hub: its notifier announces what the
parts free, its LISTEN connection carries the parts' channels to them (not the wake-ups:
no pop parks here). If a part dies (a bug), the TaskGroup cancels the rest and the process
exits with the error, to be restarted by its supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from core.embedded import database_dsn
from core.engine.listener import WakeupHub
from core.errors import ServiceError
from core.settings import Settings
from core.storage.database import Database, connect_options
from core.upkeep import stats
from core.waiting import wait_event

# The reaper's logger: these lines read as they did when this shell was the reaper's.
log = logging.getLogger("queen.reaper")


# A part gets ready (e.g. subscribes to a channel: before the hub starts listening) and
# answers what runs it until the stop event is set.
Run = Callable[[asyncio.Event], Coroutine[Any, Any, None]]
Part = Callable[[Database, WakeupHub], Awaitable[Run]]


async def serve(settings: Settings, parts: list[Part], *, name: str) -> None:
    """Run `parts` until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    db = await open_database(settings, stop)
    if db is None:
        return
    # No pop parks here: the wake-ups are announced, not heard (the parts' own channels are).
    hub = WakeupHub(db.home_dsn, connect_options(settings, role="wakeup"),
                    hears_wakeups=False, nodes=db.wake_nodes if db.topology.citus else None)
    # The process's counts (the firer's, for /metrics), added to the database as a web
    # worker adds its own.
    flusher = stats.CounterFlusher(database_dsn(settings), settings, pool_stats=db.pool_stats,
                                   parked=dict, figures=stats.no_spool, role=name)
    try:
        runs = [await part(db, hub) for part in parts]
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(hub.announce_forever(), name=f"{name}-notify")
            if hub.listens:
                tasks.create_task(hub.listen_forever(), name=f"{name}-listen")
            tasks.create_task(flusher.flush_forever(), name=f"{name}-counters")
            running = [tasks.create_task(run(stop), name=f"{name}-part-{n}")
                       for n, run in enumerate(runs)]
            try:
                await asyncio.gather(*running)
            finally:
                hub.close()
                flusher.close()
    finally:
        await db.close()
    log.info("%s stopped", name)


async def open_database(settings: Settings, stop: asyncio.Event) -> Database | None:
    """Wait for the server (it may start after us) and apply the schema; None if stopped."""
    dsn = database_dsn(settings)

    async def open_once() -> Database:
        return await Database.open(settings, dsn, wait_seconds=30)

    stopping = asyncio.create_task(stop.wait(), name="background-stop-wait")
    try:
        while not stop.is_set():
            opening = asyncio.create_task(open_once(), name="background-open-database")
            # The open retries for up to 30 s on its own; a SIGTERM must not wait for that.
            await asyncio.wait({opening, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not opening.done():
                opening.cancel()
                with contextlib.suppress(asyncio.CancelledError, ServiceError):
                    await opening
                return None
            try:
                return opening.result()
            except ServiceError as exc:
                log.warning("database not available yet: %s", exc.message)
            await wait_event(stop, 2.0)
        return None
    finally:
        stopping.cancel()
