"""The faults, one coroutine each, and the check that the broker healed by itself.

A fault record says when it was injected, whether and when the broker was whole again
(every role present, /health 200, a probe push acknowledged after the fault), and, when it
was not within the heal timeout, how the harness repaired it from outside (then the fault
counts as not survived). PostgreSQL faults also record when the server accepted connections
again (`ready_at`), from which the checker measures recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from core.embedded import EmbeddedPostgres
from core.waiting import within
from loadtest.faults import citus, ha
from loadtest.faults.base import Harness, Healer
from loadtest.faults.citus import CitusNodes
from loadtest.faults.ha import PatroniPair
from loadtest.faults.roles import postmaster_of, wait_gone
from loadtest.faults.servers import ROOT, ServeInstance, die_with_parent, kill_pids, pg_ready
from loadtest.faults.spool_fault import maintenance_kill

NAMES = ("worker_kill", "reaper_kill", "pg_kill", "pg_immediate", "worker_stop",
         "consumer_kill", "supervisor_kill", "maintenance_kill",
         "ha_pg_kill", "ha_freeze", "ha_standby_cut", "citus_worker_kill", "citus_worker_freeze",
         "citus_add_worker")


class FaultHarness(Harness, Protocol):
    """A run as the faults see it: also the Patroni pair or the Citus cluster of a run on
    one."""

    ha: PatroniPair | None
    citus: CitusNodes | None


class Injector(Healer):
    """The faults, on top of the healing every one of them ends with."""

    def __init__(self, run: FaultHarness) -> None:
        super().__init__(run)
        self.run: FaultHarness = run

    # --- faults ------------------------------------------------------------------------

    async def inject(self, name: str) -> dict[str, Any]:
        run = self.run
        inst = run.instances[-1] if name == "supervisor_kill" else self.rng.choice(
            run.instances)
        rec = await self._fault(name)(inst)
        rec.setdefault("name", name)
        rec.setdefault("target", inst.name)
        run.journal.write("fault", **rec)
        return rec

    def _fault(self, name: str) -> Callable[[ServeInstance], Awaitable[dict[str, Any]]]:
        """Fault `name`: a method here, or a fault of the Patroni pair (--database ha:
        loadtest/faults/ha.py) or of the Citus cluster (--database citus:
        loadtest/faults/citus.py), which it is given."""
        for faults, module, cluster in ((ha.HA_FAULTS, ha, self.run.ha),
                                        (citus.CITUS_FAULTS, citus, self.run.citus)):
            if name in faults:
                assert cluster is not None, f"{name} needs a run on its cluster"
                fault = getattr(module, name)
                return lambda inst: fault(self, inst, cluster)
        method: Callable[[ServeInstance], Awaitable[dict[str, Any]]] = getattr(self, name)
        return method

    async def worker_kill(self, inst: ServeInstance) -> dict[str, Any]:
        roles = await asyncio.to_thread(inst.roles)
        victim = self.rng.choice(roles.web)
        rec = {"pid": victim, "injected_at": time.time()}
        os.kill(victim, signal.SIGKILL)
        return await self.finish(rec, inst, lambda r: victim not in r.web)

    async def reaper_kill(self, inst: ServeInstance) -> dict[str, Any]:
        roles = await asyncio.to_thread(inst.roles)
        victim = roles.reaper[0]
        rec = {"pid": victim, "injected_at": time.time()}
        os.kill(victim, signal.SIGKILL)
        return await self.finish(rec, inst, lambda r: victim not in r.reaper)

    async def worker_stop(self, inst: ServeInstance) -> dict[str, Any]:
        roles = await asyncio.to_thread(inst.roles)
        victim = self.rng.choice(roles.web)
        seconds = self.run.cfg.lease_seconds + 1.5  # past the lease time
        rec: dict[str, Any] = {"pid": victim, "injected_at": time.time(),
                               "stopped_s": seconds}
        os.kill(victim, signal.SIGSTOP)
        await asyncio.sleep(seconds)
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            rec["note"] = "the stopped worker was gone at SIGCONT"
        return await self.finish(rec, inst, since=time.time())

    async def maintenance_kill(self, inst: ServeInstance) -> dict[str, Any]:
        """Push maintenance with kill -9 of a spooling worker and of the spool's drainer
        (loadtest/faults/spool_fault.py)."""
        return await maintenance_kill(self, inst)

    async def pg_kill(self, inst: ServeInstance) -> dict[str, Any]:
        return await self._crash_pg(inst, signal.SIGKILL)

    async def pg_immediate(self, inst: ServeInstance) -> dict[str, Any]:
        return await self._crash_pg(inst, signal.SIGQUIT)  # PostgreSQL's immediate shutdown

    async def _crash_pg(self, inst: ServeInstance, sig: int) -> dict[str, Any]:
        ext = self.run.ext_pg
        if ext is not None:
            rec: dict[str, Any] = {"pid": ext.pid, "signal": sig, "external": True,
                                   "injected_at": time.time()}
            await asyncio.to_thread(ext.signal, sig)
            await asyncio.sleep(self.run.cfg.pg_downtime)
            await asyncio.to_thread(ext.start)
            rec["ready_at"] = time.time()
            healed = [await self.heal(i, rec["ready_at"]) for i in self.run.instances]
            rec["survived"] = all(h is not None for h in healed)
            if rec["survived"]:
                rec["healed_at"] = max(h for h in healed if h is not None)
                rec["heal_s"] = round(rec["healed_at"] - rec["injected_at"], 3)
            else:
                for i, h in zip(self.run.instances, healed):
                    if h is None:
                        await self.repair(i, rec)
            return rec
        roles = await asyncio.to_thread(inst.roles)
        victim = roles.postmaster
        assert victim is not None, roles
        rec = {"pid": victim, "signal": sig, "injected_at": time.time()}
        os.kill(victim, sig)
        watcher = asyncio.create_task(self._watch_ready(inst, victim, rec))
        try:
            await self.finish(rec, inst, lambda r: r.postmaster not in (None, victim))
            with contextlib.suppress(TimeoutError):
                await within(10, asyncio.shield(watcher))
            return rec
        finally:
            watcher.cancel()

    async def _watch_ready(self, inst: ServeInstance, victim: int,
                           rec: dict[str, Any]) -> None:
        socket_dir = EmbeddedPostgres(inst.data_dir).socket_dir
        while True:
            pid = inst.pid
            current = await asyncio.to_thread(postmaster_of, pid) if pid else None
            if current not in (None, victim) and await asyncio.to_thread(pg_ready, socket_dir):
                rec["ready_at"] = time.time()
                return
            await asyncio.sleep(0.02)

    async def consumer_kill(self, inst: ServeInstance) -> dict[str, Any]:
        rec: dict[str, Any] = {"target": "consumer"}
        deadline = time.monotonic() + 10
        victim = None
        while time.monotonic() < deadline and victim is None:
            for name, proc in list(self.run.consumers.items()):
                if proc.poll() is None and self.run.holding_batch(name):
                    victim = (name, proc)
                    rec["between_pop_and_ack"] = True
                    break
            else:
                await asyncio.sleep(0.02)
        if victim is None:
            name, proc = self.rng.choice(list(self.run.consumers.items()))
            victim = (name, proc)
            rec["between_pop_and_ack"] = False
        rec.update(consumer=victim[0], injected_at=time.time())
        victim[1].kill()
        rec.update(survived=True, healed_at=rec["injected_at"], heal_s=0.0)
        return rec

    async def supervisor_kill(self, inst: ServeInstance) -> dict[str, Any]:
        """kill -9 of one `serve`; its children must die with it; the harness starts it
        again (by design: this is the operator's restart). Survived when the other
        instance answered every probe meanwhile, nothing was orphaned, and the restarted
        instance became whole."""
        others = [i for i in self.run.instances if i is not inst]
        failures_before = {i.name: self.run.probe_failures.get(i.name, 0) for i in others}
        rec: dict[str, Any] = {"pid": inst.pid, "injected_at": time.time()}
        children = await asyncio.to_thread(inst.kill_supervisor)
        orphans = await asyncio.to_thread(wait_gone, children, 20.0)
        rec["children"] = len(children)
        rec["orphans"] = len(orphans)
        kill_pids(orphans)
        await asyncio.to_thread(wait_gone, orphans, 10.0)
        inst.start()
        rec["restarted_at"] = time.time()
        healed = await self.heal(inst, rec["restarted_at"])
        survivor_ok = all(self.run.probe_failures.get(i.name, 0) == failures_before[i.name]
                          for i in others)
        rec["survivor_kept_serving"] = survivor_ok
        return await self.settle(rec, inst, healed,
                                 healed is not None and survivor_ok and not orphans)


def outside_reaper(inst: ServeInstance, log: Path) -> subprocess.Popen[bytes]:
    """A reaper next to `serve`, started by the harness (a repair from outside)."""
    env = dict(inst.env)
    env["DATABASE_URL"] = inst.dsn
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "core.reaper"], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True,
                                preexec_fn=die_with_parent)  # noqa: PLW1509

