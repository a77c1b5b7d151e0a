"""What the pieces of a fault run share, so that they depend one way on each other.

run.py (the Run) uses injectors.py (the faults), ha.py (the Patroni pair and its faults),
spool_fault.py and wake.py; those know a run only as the `Harness` below and finish their
fault records with the `Healer`. None of them imports run.py or injectors.py back.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from loadtest.faults.journal import Journal
from loadtest.faults.roles import Roles
from loadtest.faults.servers import ROOT, ExternalPostgres, ServeInstance

RESULTS = ROOT / "loadtest" / "results"
SINGLE_BROKER_FAULTS = ("worker_kill", "reaper_kill", "pg_kill", "worker_stop",
                        "pg_immediate", "consumer_kill", "maintenance_kill")


@dataclass
class RunConfig:
    database: str = "embedded"         # embedded | external | ha | citus
    brokers: int = 1
    faults: tuple[str, ...] = SINGLE_BROKER_FAULTS
    duration: float = 0.0              # fault phase; 0 = one pass over the schedule
    producers: int = 3
    consumers: int = 3                 # per group
    groups: tuple[str, ...] = ("g1", "g2")
    partitions: int = 8
    lease_seconds: int = 3
    workers: int = 2
    rate: float = 12.0                 # pushes per second per producer
    warmup: float = 3.0
    gap: float = 3.0                   # seconds between faults
    heal_timeout: float = 30.0
    pg_downtime: float = 2.0           # the external PostgreSQL stays down this long
    freeze_seconds: tuple[float, ...] = ()  # ha_freeze lengths, in turn (default TTL + 10 s)
    drain_timeout: float = 120.0
    fast_disk: bool = False
    auth: bool = False                 # JWT auth on, every client with a token
    dlq: bool = True
    seed: int = 1
    out_dir: Path = field(default=RESULTS)

    @property
    def label(self) -> str:
        return "two-brokers" if self.brokers > 1 else self.database


class Harness(Protocol):
    """A fault run as its faults and watchers see it (loadtest/faults/run.py: Run)."""

    cfg: RunConfig
    token: str | None
    instances: list[ServeInstance]
    journal: Journal
    ext_pg: ExternalPostgres | None
    consumers: dict[str, subprocess.Popen[bytes]]
    probe_ok: dict[str, float]          # instance name -> time of its last good probe push
    probe_failures: dict[str, int]
    closing: bool                       # the background loops end at their next turn

    @property
    def external_database(self) -> bool:
        """`serve` runs no PostgreSQL of its own."""

    def holding_batch(self, name: str) -> bool:
        """The consumer is between a pop that got messages and its ack."""

    def start_outside_reaper(self, inst: ServeInstance) -> None:
        """A reaper next to `serve`, started by the harness (a repair from outside)."""


class Healer:
    """The healing half of an injector: every fault ends by waiting for the instance to be
    whole again, and repairs it from outside when it is not."""

    def __init__(self, run: Harness) -> None:
        self.run = run
        self.rng = random.Random(run.cfg.seed * 7919)

    # --- healing -----------------------------------------------------------------------

    async def heal(self, inst: ServeInstance, since: float,
                   condition: Callable[[Roles], bool] = lambda r: True) -> float | None:
        """Wait until `inst` is whole again after `since`; answer when, or None."""
        embedded = not self.run.external_database
        deadline = time.monotonic() + self.run.cfg.heal_timeout
        while time.monotonic() < deadline:
            if not inst.exited():
                roles = await asyncio.to_thread(inst.roles)
                whole = (len(roles.web) == inst.workers and len(roles.reaper) >= 1
                         and (roles.postmaster is not None or not embedded))
                if whole and condition(roles) and self.run.probe_ok.get(inst.name, 0) > since:
                    return time.time()
            await asyncio.sleep(0.1)
        return None

    async def repair(self, inst: ServeInstance, rec: dict[str, Any]) -> None:
        """Bring `inst` back from outside (the fault was not survived)."""
        if inst.exited():
            rec["outside_restart"] = "serve had exited: started again"
            inst.start()
        else:
            roles = await asyncio.to_thread(inst.roles)
            if not roles.reaper and len(roles.web) == inst.workers and (
                    roles.postmaster is not None or self.run.external_database):
                rec["outside_restart"] = "reaper missing: started one beside serve"
                self.run.start_outside_reaper(inst)
            else:
                rec["outside_restart"] = f"incomplete ({roles}): serve restarted"
                await asyncio.to_thread(inst.stop)
                inst.start()
        since = time.time()
        await inst.wait_healthy(90)
        await self.heal(inst, since)
        rec["repaired_at"] = time.time()

    async def finish(self, rec: dict[str, Any], inst: ServeInstance,
                     condition: Callable[[Roles], bool] = lambda r: True,
                     since: float | None = None) -> dict[str, Any]:
        healed = await self.heal(inst, since if since is not None else rec["injected_at"],
                                 condition)
        return await self.settle(rec, inst, healed, healed is not None)

    async def settle(self, rec: dict[str, Any], inst: ServeInstance, healed: float | None,
                     survived: bool) -> dict[str, Any]:
        """Record the outcome; an instance that did not heal is repaired from outside."""
        rec["survived"] = survived
        if healed is not None:
            rec["healed_at"] = healed
            rec["heal_s"] = round(healed - rec["injected_at"], 3)
        else:
            await self.repair(inst, rec)
        return rec
