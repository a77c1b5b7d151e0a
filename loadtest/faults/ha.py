"""`--database ha`: the ledger on a Patroni pair (broker/patroni.py), and its faults.

The harness runs two Patroni nodes and the Raft witness from a directory of its own, on
ports of its own, and gives `serve` the pair's two-host DATABASE_URL. Faults:

- `ha_pg_kill`: kill -9 of the primary's postmaster (Patroni restarts it, or the standby
  takes over: whichever comes first);
- `ha_freeze`: SIGSTOP of the primary's whole node (Patroni and PostgreSQL, as a frozen or
  partitioned machine) for longer than the leader key's TTL (TTL + 10 s, or the lengths of
  `RunConfig.freeze_seconds` in turn), so the standby is promoted; the old primary is
  resumed afterwards and must rejoin as a standby (pg_rewind). It also records when the
  standby was promoted (`promoted_s`: its Patroni REST API answers `/primary` 200), and
  from there to the first push committed (`pause_after_promotion_s`), and whether that
  commit came while the old primary was still frozen (`committed_while_frozen`);
- `ha_standby_cut`: SIGSTOP of the synchronous standby's node; commits wait for it until
  Patroni drops it from the synchronous set, then the primary goes on alone.

Each fault records `ready_at` = the moment its signals were sent, so the checker's
`recovery_s` is the time from the fault to the first push started after it that was answered
201; with the push spool on, that may be `buffered` (taken, not yet written). So each fault
also measures `first_queued_s`: from the fault to the first push, started after it, answered
`queued`, i.e. committed on a primary (a push every 100 ms). A fault is healed once a probe
push succeeded and the pair has a leader and a streaming synchronous standby again.

The broker runs with its shipped settings: nothing here shortens a timeout for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from broker.patroni import NODES, Layout
from broker.ports import free_block
from loadtest.faults.base import Healer
from loadtest.faults.client import Caller
from loadtest.faults.roles import wait_gone
from loadtest.faults.servers import ROOT, ServeInstance, die_with_parent

HA_FAULTS = ("ha_pg_kill", "ha_freeze", "ha_standby_cut")
HEAL_SECONDS = 120.0
STANDBY_CUT_SECONDS = 12.0
_LOG_TAIL_LINES = 15


class PatroniPair:
    """Two Patroni nodes and the witness, as child processes of the harness."""

    def __init__(self, root: Path, log_dir: Path) -> None:
        self.layout = Layout(root, base_port=free_block(23))  # base+1 .. base+23
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.freezes = 0  # ha_freeze faults injected so far (their lengths go in turn)

    @property
    def dsn(self) -> str:
        return self.layout.dsn()

    def _spawn(self, name: str, *args: str) -> None:
        env = {**os.environ, "QUEEN_HA_DIR": str(self.layout.root),
               "QUEEN_HA_BASE_PORT": str(self.layout.base_port)}
        with open(self.log_path(name), "ab") as out:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "broker.patroni", *args], cwd=ROOT, env=env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=die_with_parent)  # noqa: PLW1509

    def start(self, timeout: float = 180.0) -> None:
        self.layout.root.mkdir(parents=True, exist_ok=True)
        self._spawn("witness", "witness")
        for node in NODES:
            self._spawn(node, "node", node)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy():
                return
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"Patroni {name} exited ({proc.returncode}):\n"
                                       f"{self.log_tail(name)}\n(log: {self.log_path(name)})")
            time.sleep(0.5)
        raise RuntimeError(f"the Patroni pair did not come up in {timeout:.0f} s; "
                           f"see {self.log_dir}")

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"patroni-{name}.log"

    def log_tail(self, name: str) -> str:
        try:
            lines = self.log_path(name).read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-_LOG_TAIL_LINES:])

    def is_primary(self, node: str) -> bool:
        """Does `node`'s Patroni say it runs the primary (REST `GET /primary` answers 200)?"""
        i = self.layout.index(node)
        url = f"http://{self.layout.hosts[i]}:{self.layout.rest_port(node)}/primary"
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                return int(answer.status) == 200
        except (OSError, ValueError):  # HTTPError (503: not the primary) is an OSError
            return False

    def views(self) -> list[list[dict[str, Any]]]:
        """Each answering node's view of the cluster (Patroni's REST API)."""
        out = []
        for i, node in enumerate(NODES):
            url = f"http://{self.layout.hosts[i]}:{self.layout.rest_port(node)}/cluster"
            with contextlib.suppress(OSError, ValueError), \
                    urllib.request.urlopen(url, timeout=1) as answer:
                out.append(list(json.load(answer).get("members", [])))
        return out

    def role(self, role: str) -> str | None:
        """The node in `role`, when every answering node says the same."""
        names = {next((str(m["name"]) for m in view if m.get("role") == role), None)
                 for view in self.views()}
        return names.pop() if len(names) == 1 else None

    def healthy(self) -> bool:
        """Both nodes answer and agree: a leader running and a synchronous standby streaming
        from it (a node just resumed from SIGSTOP may report a stale view for a moment)."""
        views = self.views()
        if len(views) < len(NODES):
            return False
        states = {tuple(sorted((str(m.get("name")), str(m.get("role")), str(m.get("state")))
                               for m in view)) for view in views}
        if len(states) != 1:
            return False
        members = views[0]
        return (any(m.get("role") == "leader" and m.get("state") == "running" for m in members)
                and any(m.get("role") == "sync_standby" and m.get("state") == "streaming"
                        for m in members))

    def postmaster_pid(self, node: str) -> int:
        text = (self.layout.node_dir(node) / "pg" / "postmaster.pid").read_text()
        return int(text.split()[0])

    def signal_node(self, node: str, sig: int) -> None:
        """Signal a node's Patroni and its PostgreSQL: the postmaster (Patroni starts it
        detached, so it is no child of Patroni) and every process under either (backends
        are sessions of their own, so no process group covers them)."""
        roots = [psutil.Process(self.procs[node].pid)]
        with contextlib.suppress(OSError, ValueError, psutil.Error):
            postmaster = psutil.Process(self.postmaster_pid(node))
            if str(self.layout.node_dir(node)) in " ".join(postmaster.cmdline()):
                roots.append(postmaster)
        procs = {p.pid: p for root in roots for p in [root, *root.children(recursive=True)]}
        for proc in procs.values():
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)

    def stop(self) -> None:
        """End the pair at once. Its directory is deleted right after (Run.teardown), so an
        orderly shutdown buys nothing, and it took 5-7 s of every run: the leader's Patroni
        asks its standby's REST API (2 s timeouts) before it lets go of the key. Patroni and
        the witness get SIGKILL (no Patroni is left to start a PostgreSQL again), then each
        postmaster SIGQUIT (PostgreSQL's immediate shutdown, which removes its shared memory
        on the way out; a postmaster killed with SIGKILL would leave its System V segment
        behind) and its processes SIGKILL (left to the postmaster, they took ~2 s to end)."""
        postmasters = []
        for node in NODES:
            proc = self.procs.get(node)
            if proc is not None and proc.poll() is None:
                self.signal_node(node, signal.SIGCONT)  # a frozen node must run to exit
            with contextlib.suppress(OSError, ValueError, psutil.Error):
                postmaster = psutil.Process(self.postmaster_pid(node))
                if str(self.layout.node_dir(node)) in " ".join(postmaster.cmdline()):
                    postmasters.append(postmaster)
        for proc in self.procs.values():
            with contextlib.suppress(psutil.Error):  # pg_rewind, pg_basebackup, ...
                for child in psutil.Process(proc.pid).children(recursive=True):
                    if child not in postmasters:
                        with contextlib.suppress(psutil.Error):
                            child.kill()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for postmaster in postmasters:
            with contextlib.suppress(psutil.Error):
                backends = postmaster.children()
                postmaster.send_signal(signal.SIGCONT)  # frozen, with its Patroni gone
                postmaster.send_signal(signal.SIGQUIT)
                for backend in backends:
                    with contextlib.suppress(psutil.Error):
                        backend.kill()
        # Exited is enough: init, not we, reaps a postmaster, and it may take seconds to
        # (psutil's wait waited that long), so a zombie counts as gone (roles.wait_gone).
        for pid in wait_gone([p.pid for p in postmasters], 30):
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        self.procs.clear()


async def _first_queued(injector: Healer, inst: ServeInstance, rec: dict[str, Any]) -> None:
    """Set rec["first_queued_s"]: fault to the first push started after it that answered
    `queued` (committed), pushing every 100 ms."""
    caller = Caller([inst.url], token=injector.run.token)
    n = 0
    try:
        while True:
            if "ready_at" in rec:
                out = await caller.call("POST", "/api/v1/push", {"items": [
                    {"queue": "probe", "partition": "ha-first", "payload": n}]})
                n += 1
                if out.t0 >= rec["ready_at"] and out.status == 201 and isinstance(
                        out.body, list) and out.body and out.body[0].get("status") == "queued":
                    rec["first_queued_at"] = out.t1
                    rec["first_queued_s"] = round(out.t1 - rec["injected_at"], 3)
                    return
            await asyncio.sleep(0.1)
    finally:
        await caller.close()


async def _run_fault(injector: Healer, inst: ServeInstance, pair: PatroniPair,
                     rec: dict[str, Any], act: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    """Inject (`act` sends the signals and sets rec["ready_at"] once they are sent), then
    wait until healed: a probe push acknowledged and a push answered `queued` after the
    fault, and the pair whole again."""
    rec["injected_at"] = time.time()
    watcher = asyncio.create_task(_first_queued(injector, inst, rec))
    try:
        await act()
        deadline = time.monotonic() + HEAL_SECONDS
        while time.monotonic() < deadline:
            if injector.run.probe_ok.get(inst.name, 0) > rec["ready_at"] and watcher.done() \
                    and await asyncio.to_thread(pair.healthy):
                rec["leader_after"] = await asyncio.to_thread(pair.role, "leader")
                return await injector.settle(rec, inst, time.time(), True)
            await asyncio.sleep(0.2)
        return await injector.settle(rec, inst, None, False)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _whole(pair: PatroniPair, role: str) -> str:
    """The node in `role` once the pair is whole (a fault starts on a healthy pair)."""
    deadline = time.monotonic() + HEAL_SECONDS
    while time.monotonic() < deadline:
        if await asyncio.to_thread(pair.healthy):
            node = await asyncio.to_thread(pair.role, role)
            if node is not None:
                return node
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the Patroni pair has no {role} after {HEAL_SECONDS:.0f} s: "
                       f"{pair.views()}")


async def ha_pg_kill(injector: Healer, inst: ServeInstance, pair: PatroniPair
                     ) -> dict[str, Any]:
    leader = await _whole(pair, "leader")
    pid = pair.postmaster_pid(leader)
    rec: dict[str, Any] = {"target": f"{leader} postmaster", "pid": pid,
                           "leader_before": leader}

    async def act() -> None:
        os.kill(pid, signal.SIGKILL)
        rec["ready_at"] = time.time()

    return await _run_fault(injector, inst, pair, rec, act)


def freeze_length(injector: Healer, pair: PatroniPair) -> float:
    """The next freeze's length: RunConfig.freeze_seconds in turn, or the TTL + 10 s."""
    lengths = injector.run.cfg.freeze_seconds
    pair.freezes += 1
    if lengths:
        return float(lengths[(pair.freezes - 1) % len(lengths)])
    return pair.layout.ttl + 10.0


async def _watch_promotion(pair: PatroniPair, node: str, rec: dict[str, Any]) -> None:
    """Set rec["promoted_at"] once `node` runs the primary (polled every 100 ms)."""
    while not await asyncio.to_thread(pair.is_primary, node):
        await asyncio.sleep(0.1)
    rec["promoted_at"] = time.time()


async def ha_freeze(injector: Healer, inst: ServeInstance, pair: PatroniPair
                    ) -> dict[str, Any]:
    leader = await _whole(pair, "leader")
    standby = next(n for n in NODES if n != leader)
    seconds = freeze_length(injector, pair)
    rec: dict[str, Any] = {"target": f"{leader} node", "leader_before": leader,
                           "stopped_s": seconds}

    async def act() -> None:
        promotion = asyncio.create_task(_watch_promotion(pair, standby, rec))
        pair.signal_node(leader, signal.SIGSTOP)
        rec["ready_at"] = time.time()
        try:
            await asyncio.sleep(seconds)
            rec["leader_while_frozen"] = await asyncio.to_thread(pair.role, "leader")
        finally:
            pair.signal_node(leader, signal.SIGCONT)
            rec["resumed_at"] = time.time()
            promotion.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await promotion

    out = await _run_fault(injector, inst, pair, rec, act)
    failover_figures(out)
    return out


def failover_figures(rec: dict[str, Any]) -> None:
    """From the times a freeze recorded: fault to promotion, promotion to the first push
    committed after the fault, and whether that commit came before the old primary was
    resumed."""
    fault, promoted = rec.get("injected_at"), rec.get("promoted_at")
    committed = rec.get("first_queued_at")
    if fault is not None and promoted is not None:
        rec["promoted_s"] = round(promoted - fault, 3)
        if committed is not None:
            rec["pause_after_promotion_s"] = round(committed - promoted, 3)
    if committed is not None and rec.get("resumed_at") is not None:
        rec["committed_while_frozen"] = committed < rec["resumed_at"]


async def ha_standby_cut(injector: Healer, inst: ServeInstance, pair: PatroniPair
                         ) -> dict[str, Any]:
    standby = await _whole(pair, "sync_standby")
    rec: dict[str, Any] = {"target": f"{standby} node (sync standby)",
                           "stopped_s": STANDBY_CUT_SECONDS}

    async def act() -> None:
        pair.signal_node(standby, signal.SIGSTOP)
        rec["ready_at"] = time.time()
        try:
            await asyncio.sleep(STANDBY_CUT_SECONDS)
        finally:
            pair.signal_node(standby, signal.SIGCONT)

    return await _run_fault(injector, inst, pair, rec, act)
