"""The reaper process: `python -m core.reaper`.

One small asyncio process (uvloop) with one loop: every REAPER_INTERVAL_MS (jittered) it
expires leases and prunes the transactionId index; every RETENTION_INTERVAL ms it also applies
retention to segments and to traces (TRACE_RETENTION_DAYS); every STATS_SAMPLE_INTERVAL_MS it
takes an analytics sample and trims old ones (`core/upkeep/stats.py`). The other steps live in
`core/upkeep/maintenance.py`. Beside that loop it runs the timer firer (core/timers/firer.py says
why here), told by a LISTEN connection when a timer is due before its next sweep. The
process holds no state: it can be killed at any moment and restarted, and two copies at once
are harmless. The process around both (signals, waiting for the database, the wake-up hub,
the counters) is core/background.py's.

A database outage does not stop the process: the pass fails, is logged, and the next pass
tries again, so `queen-broker serve` (which stops everything when a child dies) survives a
PostgreSQL restart. Any other exception is a bug and ends the process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import sys
import time

import uvloop

from core import background
from core.engine.listener import WakeupHub
from core.errors import ServiceError
from core.kv.service import sweep as sweep_kv
from core.logs import configure_logging
from core.settings import Settings, from_env_or_exit
from core.storage.database import Database
from core.timers import firer
from core.upkeep import maintenance, stats
from core.waiting import wait_event

log = logging.getLogger("queen.reaper")

# The reaper runs one statement at a time; two connections leave room for the notify; the
# timer firer (a task of this process) holds its own on top.
_POOL_SIZE = 2 + firer.POOL_SIZE
# Spread passes of several reapers (and of many brokers' reapers) apart: ±20 %.
_JITTER = 0.2
# Dead KV rows deleted per statement, and statements per pass: a pass stays short however
# many keys expired at once; the rest goes on the next pass (expired rows are invisible
# before they are swept, so sweeping late changes nothing a client sees).
KV_SWEEP_BATCH = 1000
KV_SWEEP_BATCHES = 10



class Reaper:
    """The maintenance loop over one Database; `run` returns when `stop` is set. Leases it
    releases are announced through `hub` (its notifier wakes pops in the web processes)."""

    def __init__(self, db: Database, settings: Settings, hub: WakeupHub | None = None) -> None:
        self._db = db
        self._hub = hub
        self._interval = settings.reaper_interval_ms / 1000
        self._retention_interval = settings.retention_interval_ms / 1000
        self._segment_batch = settings.retention_batch_size
        self._trace_retention_seconds = settings.trace_retention_days * 86400
        self._next_retention = 0.0  # monotonic; 0 = due on the first pass
        self._sample_interval = settings.stats_sample_interval_ms / 1000
        self._settings = settings
        self._sample_retention_days = settings.metrics_retention_days
        self._minutes_retention_days = settings.process_metrics_retention_days
        self._next_sample = 0.0

    async def run_pass(self) -> maintenance.PassReport:
        now = time.monotonic()
        retention = now >= self._next_retention
        report = await maintenance.run_pass(
            self._db, retention=retention, segment_batch=self._segment_batch,
            announce=self._hub.announce if self._hub is not None else None,
            trace_retention_seconds=self._trace_retention_seconds)
        report.kv_rows_swept = await sweep_kv(self._db, batch=KV_SWEEP_BATCH,
                                              max_batches=KV_SWEEP_BATCHES)
        # Scheduled only after a pass that went through, so a failed retention is retried on
        # the next pass instead of a whole RETENTION_INTERVAL later.
        if retention:
            self._next_retention = now + self._retention_interval
        if now >= self._next_sample:
            # Scheduled first: a sample that fails is tried again a sample interval later,
            # not on every pass.
            self._next_sample = now + self._sample_interval
            report.queues_sampled = await stats.sample(self._db, self._settings)
            await stats.housekeeping(self._db, retention_days=self._sample_retention_days,
                                     minutes_retention_days=self._minutes_retention_days)
        return report

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                report = await self.run_pass()
                if (report.leases_expired or report.index_rows_pruned or report.segments_deleted
                        or report.traces_deleted or report.kv_rows_swept):
                    log.info("reaper pass: %s", report)
            except asyncio.CancelledError:
                raise
            except ServiceError as exc:
                log.warning("reaper pass failed, will retry: %s", exc.message)
            delay = self._interval * random.uniform(1 - _JITTER, 1 + _JITTER)
            await wait_event(stop, delay)


def part(settings: Settings) -> background.Part:
    """The maintenance loop as a part of the reaper process."""
    async def start(db: Database, hub: WakeupHub) -> background.Run:
        log.info("reaper running (interval %d ms, retention every %d ms)",
                 settings.reaper_interval_ms, settings.retention_interval_ms)
        return Reaper(db, settings, hub).run
    return start


def main() -> int:
    settings = from_env_or_exit("queen-reaper")
    configure_logging(settings.log_level)
    settings = dataclasses.replace(settings, db_pool_size=_POOL_SIZE)
    uvloop.run(background.serve(settings, [firer.part(settings), part(settings)],
                                name="reaper"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
