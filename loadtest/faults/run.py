"""One fault run: start the broker(s), run the ledger and the DLQ variant under a fault
schedule, heal, drain, read the tables back, and check.

Configurations (docs/architecture/reliability.md, "The fault ledger"):

- `embedded`: one `serve` with its own embedded PostgreSQL, which the faults crash;
- `external`: one `serve` on a PostgreSQL the harness runs (DATABASE_URL) and restarts;
- `ha`: one `serve` on a Patroni pair (primary + synchronous standby, loadtest/faults/ha.py)
  whose primary the faults kill, freeze or lose the standby of;
- `two-brokers`: two `serve` on two ports over one external PostgreSQL, producers and
  consumers spread over both; one `serve` is killed with kill -9 and started again, and
  long polls parked on one broker are woken by pushes to the other (latency measured).

With `auth`, every broker runs with JWT auth on (HS256, a secret made for the run) and every
client sends a token: producers and consumers a read-write one, the driver an admin one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import jwt

from broker.ports import free_port
from core.embedded import stop_process
from loadtest.faults import dlq, snapshot
from loadtest.faults.base import RunConfig
from loadtest.faults.checker import MAX_RECOVERY_S, Inputs, check, verdict
from loadtest.faults.citus import CitusNodes
from loadtest.faults.client import Caller, bearer
from loadtest.faults.ha import PatroniPair
from loadtest.faults.injectors import Injector, outside_reaper
from loadtest.faults.journal import Journal, read_all
from loadtest.faults.servers import (
    ROOT,
    ExternalPostgres,
    ServeInstance,
    die_with_parent,
    write_fast_settings,
)
from loadtest.faults.wake import wake_loop, wake_summary

LEDGER_QUEUE = "ledger"
DLQ_QUEUE = "ledger-dlq"
PROBE_QUEUE = "probe"
TWO_BROKER_FAULTS = ("supervisor_kill", "worker_kill", "pg_kill", "consumer_kill")
# Only the server process is killed, never the machine, so the OS page cache survives and
# fsync may be off in CI-sized runs; synchronous_commit stays on (an acknowledged commit must
# be in the WAL before the answer). Long runs keep the server durable.
FAST_DISK = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "on"}
DURABLE = {"fsync": "on", "full_page_writes": "on", "synchronous_commit": "on"}
TASK_STOP_SECONDS = 10.0
# With a Patroni pair, a frozen primary keeps its leader key for the TTL: the first push after
# it may come that long after the fault, plus Patroni's loop and the promotion.
HA_RECOVERY_SLACK_S = 20.0


def run_tokens(auth: bool) -> tuple[dict[str, str], str | None, str | None]:
    """The brokers' auth settings, the workload's token and the driver's, for a run with
    auth on (a secret and tokens made for the run); nothing without."""
    if not auth:
        return {}, None, None
    secret = secrets.token_urlsafe(48)
    expires = int(time.time()) + 24 * 3600

    def token(sub: str, role: str) -> str:
        return jwt.encode({"sub": sub, "role": role, "exp": expires}, secret, algorithm="HS256")

    return ({"JWT_ENABLED": "true", "JWT_ALGORITHM": "HS256", "JWT_SECRET": secret},
            token("fault-workload", "read-write"), token("fault-driver", "admin"))


async def cancel_until_done(tasks: list[asyncio.Task[None]],
                            timeout: float) -> set[asyncio.Task[None]]:
    """Cancel `tasks` until every one has ended or `timeout` passed; answer those left.

    One cancel is not enough on Python 3.11: `asyncio.wait_for` returns its inner result
    and drops a cancel that arrives in the same turn as that result (gh-86296, fixed in
    3.12), so a loop calling it can live on, and awaiting it once cancelled hung a CI run
    for its whole 900 s timeout."""
    deadline = time.monotonic() + timeout
    pending = {t for t in tasks if not t.done()}
    while pending and time.monotonic() < deadline:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=min(
            0.5, max(0.01, deadline - time.monotonic())))
    for task in tasks:  # collect the outcomes, so none is reported as never retrieved
        if task.done() and not task.cancelled():
            task.exception()
    return pending


class Run:
    def __init__(self, cfg: RunConfig) -> None:
        if cfg.brokers > 1 and cfg.database != "external":
            raise ValueError("two brokers share one external PostgreSQL: use database=external")
        self.cfg = cfg
        self.run_id = time.strftime("%Y%m%d-%H%M%S") + f"-{cfg.label}"
        self.run_dir = cfg.out_dir / f"faults-{self.run_id}"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # Short: Unix socket paths of the databases live under it.
        self.data_root = Path(tempfile.mkdtemp(prefix="qf-"))
        self.journal = Journal(self.run_dir / "driver.jsonl")
        self.instances: list[ServeInstance] = []
        self.ext_pg: ExternalPostgres | None = None
        self.ha: PatroniPair | None = None
        self.citus: CitusNodes | None = None
        self.producers: list[subprocess.Popen[bytes]] = []
        self.consumers: dict[str, subprocess.Popen[bytes]] = {}
        self._slots: dict[str, tuple[str, int, int]] = {}  # name -> group, slot, generation
        self.dlq_consumers: list[subprocess.Popen[bytes]] = []
        self.outside_reapers: list[subprocess.Popen[bytes]] = []
        self.probe_ok: dict[str, float] = {}
        self.probe_failures: dict[str, int] = {}
        self.stop_producers = self.run_dir / "stop-producers"
        self.stop_consumers = self.run_dir / "stop-consumers"
        self.drain = self.run_dir / "drain"
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.closing = False  # the background loops end at their next turn
        self.auth_env, self.token, self.admin_token = run_tokens(cfg.auth)
        self.admin_headers = bearer(self.admin_token)

    # --- processes -----------------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        return [i.url for i in self.instances]

    @property
    def external_database(self) -> bool:
        """`serve` runs no PostgreSQL of its own."""
        return self.ext_pg is not None or self.ha is not None or self.citus is not None

    @property
    def database_url(self) -> str | None:
        if self.ha is not None:
            return self.ha.dsn
        if self.citus is not None:
            return self.citus.dsn
        return self.ext_pg.dsn if self.ext_pg is not None else None

    @property
    def dsn(self) -> str:
        return self.database_url or self.instances[0].embedded_dsn

    def _spawn(self, module: str, config: dict[str, Any], log: str) -> subprocess.Popen[bytes]:
        with open(self.run_dir / f"{log}.log", "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", module, json.dumps(config)], cwd=ROOT, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=functools.partial(die_with_parent, signal.SIGKILL))  # noqa: PLW1509

    def _consumer_config(self, group: str, slot: int, gen: int) -> dict[str, Any]:
        cfg = self.cfg
        return {"name": f"{group}-s{slot}-{gen}", "group": group, "urls": self.urls,
                "token": self.token,
                "queue": LEDGER_QUEUE, "lease_seconds": cfg.lease_seconds,
                "run_dir": str(self.run_dir), "seed": cfg.seed * 10_000 + slot * 100 + gen
                + 5000 * cfg.groups.index(group), "stop_file": str(self.stop_consumers),
                "drain_file": str(self.drain)}

    def _spawn_consumer(self, group: str, slot: int, gen: int) -> None:
        config = self._consumer_config(group, slot, gen)
        self.consumers[config["name"]] = self._spawn("loadtest.faults.consumer", config,
                                                     "consumers")
        self._slots[config["name"]] = (group, slot, gen)

    def spawn_workload(self) -> None:
        cfg = self.cfg
        parts = [f"P{k}" for k in range(cfg.partitions)]
        for i in range(cfg.producers):
            self.producers.append(self._spawn("loadtest.faults.producer", {
                "name": f"p{i}", "urls": self.urls, "token": self.token, "queue": LEDGER_QUEUE,
                "partitions": parts,
                "run_dir": str(self.run_dir), "seed": cfg.seed * 100 + i, "rate": cfg.rate,
                "max_items": 4, "dup_prob": 0.06, "stop_file": str(self.stop_producers)},
                "producers"))
        for group in cfg.groups:
            for slot in range(cfg.consumers):
                self._spawn_consumer(group, slot, 0)
        if cfg.dlq:
            self.producers.append(self._spawn("loadtest.faults.producer", {
                "name": "d0", "urls": self.urls, "token": self.token, "queue": DLQ_QUEUE,
                "partitions": [f"D{k}" for k in range(4)], "run_dir": str(self.run_dir),
                "seed": cfg.seed * 100 + 99, "rate": cfg.rate / 3, "max_items": 3,
                "dup_prob": 0.0, "stop_file": str(self.stop_producers)}, "producers"))
            for group in cfg.groups:
                self.dlq_consumers.append(self._spawn("loadtest.faults.dlq", {
                    "name": f"dlq-{group}", "group": group, "urls": self.urls,
                    "token": self.token,
                    "queue": DLQ_QUEUE, "lease_seconds": cfg.lease_seconds,
                    "run_dir": str(self.run_dir), "seed": cfg.seed * 1000 + 7,
                    "stop_file": str(self.stop_consumers), "drain_file": str(self.drain),
                    "max_batch": 5, "max_partitions": 2, "tasks": 2}, "consumers"))

    def holding_batch(self, name: str) -> bool:
        """The consumer's last record is a pop with messages: it is between pop and ack."""
        path = self.run_dir / f"consumer-{name}.jsonl"
        try:
            with open(path, "rb") as f:
                f.seek(max(0, path.stat().st_size - 8192))
                lines = f.read().splitlines()
            last = json.loads(lines[-1]) if lines else None
        except (OSError, ValueError):
            return False
        return bool(last and last.get("k") == "pop" and last.get("msgs"))

    def start_outside_reaper(self, inst: ServeInstance) -> None:
        self.outside_reapers.append(outside_reaper(inst, self.run_dir / "outside-reaper.log"))

    # --- background tasks ----------------------------------------------------------------

    async def _probe(self, inst: ServeInstance) -> None:
        """One push every 250 ms per broker: heal checks and recovery times rest on them."""
        caller = Caller([inst.url], token=self.token)
        n = 0
        try:
            while not self.closing:
                out = await caller.call("POST", "/api/v1/push", {"items": [
                    {"queue": PROBE_QUEUE, "partition": inst.name, "payload": n}]})
                n += 1
                self.journal.write("probe", target=inst.name, **out.record())
                if out.status == 201:
                    self.probe_ok[inst.name] = out.t0
                elif not inst.exited():
                    self.probe_failures[inst.name] = self.probe_failures.get(inst.name, 0) + 1
                await asyncio.sleep(0.25)
        finally:
            await caller.close()

    async def _keep_consumers(self) -> None:
        """Consumers are clients: one that died (on purpose or killed) is replaced."""
        while not self.closing:
            for name, proc in list(self.consumers.items()):
                if proc.poll() is not None and not self._stopping:
                    del self.consumers[name]
                    group, slot, gen = self._slots[name]
                    self.journal.write("respawn", consumer=name, code=proc.returncode)
                    self._spawn_consumer(group, slot, gen + 1)
            await asyncio.sleep(0.3)

    # --- phases --------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.cfg
        disk = FAST_DISK if cfg.fast_disk else DURABLE
        if cfg.database == "external":
            self.ext_pg = ExternalPostgres(self.data_root / "ext", disk)
            await asyncio.to_thread(self.ext_pg.start)
        env = {"REAPER_INTERVAL_MS": "200", "DB_POOL_SIZE": "10", **self.auth_env}
        if cfg.database == "ha":
            self.ha = PatroniPair(self.data_root / "ha", self.run_dir)
            await asyncio.to_thread(self.ha.start)
        if cfg.database == "citus":
            self.citus = CitusNodes(self.data_root / "citus", disk)
            await asyncio.to_thread(self.citus.start)
        for i in range(cfg.brokers):
            data_dir = self.data_root / f"b{i}"
            if not self.external_database:
                await asyncio.to_thread(write_fast_settings, data_dir, disk)
            inst = ServeInstance(f"b{i}", free_port(), data_dir, workers=cfg.workers,
                                 database_url=self.database_url,
                                 env=env, log_dir=self.run_dir)
            inst.start()
            self.instances.append(inst)
        for inst in self.instances:
            if not await inst.wait_healthy(90):
                raise RuntimeError(f"serve {inst.name} did not become healthy; "
                                   f"see {inst.log_path}")
        async with httpx.AsyncClient(base_url=self.urls[0], timeout=30,
                                     headers=self.admin_headers) as client:
            for queue, options in ((LEDGER_QUEUE, {"leaseTime": cfg.lease_seconds}),
                                   (DLQ_QUEUE, {"leaseTime": cfg.lease_seconds,
                                                "retryLimit": dlq.RETRY_LIMIT})):
                r = await client.post("/api/v1/configure",
                                      json={"queue": queue, "options": options})
                r.raise_for_status()

    async def fault_phase(self) -> list[dict[str, Any]]:
        cfg = self.cfg
        injector = Injector(self)
        await asyncio.sleep(cfg.warmup)
        started = time.monotonic()
        done: list[dict[str, Any]] = []
        i = 0
        while True:
            name = cfg.faults[i % len(cfg.faults)]
            rec = await injector.inject(name)
            done.append(rec)
            print(f"  fault {name} on {rec.get('target')}: survived={rec.get('survived')} "
                  f"heal_s={rec.get('heal_s')} {rec.get('outside_restart') or ''}",
                  file=sys.stderr)
            i += 1
            if i >= len(cfg.faults) and time.monotonic() - started >= cfg.duration:
                return done
            await asyncio.sleep(cfg.gap)

    async def heal_and_drain(self) -> float | None:
        self.stop_producers.touch()
        for proc in self.producers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.wait, 150)
        self.drain.touch()
        started = time.monotonic()
        queues = [LEDGER_QUEUE] + ([DLQ_QUEUE] if self.cfg.dlq else [])
        while time.monotonic() - started < self.cfg.drain_timeout:
            with contextlib.suppress(OSError, TimeoutError, asyncpg.PostgresError):
                if await snapshot.drained(self.dsn, queues, list(self.cfg.groups)):
                    return round(time.monotonic() - started, 2)
            await asyncio.sleep(0.25)
        return None

    async def stop_workload(self) -> None:
        self._stopping = True
        self.stop_producers.touch()
        self.stop_consumers.touch()
        procs = self.producers + list(self.consumers.values()) + self.dlq_consumers
        deadline = time.monotonic() + 20
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.wait, max(0.1, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    async def teardown(self) -> None:
        self.closing = True
        left = await cancel_until_done(self._tasks, TASK_STOP_SECONDS)
        if left:
            print(f"  background tasks still running after {TASK_STOP_SECONDS} s: "
                  f"{', '.join(t.get_name() for t in left)}", file=sys.stderr)
        await self.stop_workload()
        for inst in self.instances:
            await asyncio.to_thread(inst.stop)
        for proc in self.outside_reapers:
            stop_process(proc, signal.SIGTERM, timeout=10)
        if self.ext_pg is not None:
            await asyncio.to_thread(self.ext_pg.stop)
        if self.ha is not None:
            await asyncio.to_thread(self.ha.stop)
        if self.citus is not None:
            await asyncio.to_thread(self.citus.stop)
        self.journal.close()
        shutil.rmtree(self.data_root, ignore_errors=True)

    async def dlq_route_totals(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        async with httpx.AsyncClient(base_url=self.urls[0], timeout=30,
                                     headers=self.admin_headers) as client:
            for group in self.cfg.groups:
                r = await client.get("/api/v1/dlq", params={
                    "queue": DLQ_QUEUE, "consumerGroup": group, "limit": 1})
                totals[group] = int(r.json()["total"])
        return totals

    async def execute(self) -> dict[str, Any]:
        cfg = self.cfg
        result: dict[str, Any] = {"run_id": self.run_id, "config": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
            "argv": sys.argv}
        print(f"fault run {self.run_id}: journals in {self.run_dir}", file=sys.stderr)
        try:
            await self.start()
            result["serve_pids"] = {i.name: i.pid for i in self.instances}
            self.spawn_workload()
            self._tasks = [asyncio.create_task(self._probe(i), name=f"probe-{i.name}")
                           for i in self.instances]
            self._tasks.append(asyncio.create_task(self._keep_consumers(), name="consumers"))
            if cfg.brokers > 1:
                self._tasks.append(asyncio.create_task(wake_loop(self), name="wake"))
            await self.fault_phase()
            result["drain_s"] = await self.heal_and_drain()
            await self.stop_workload()
            queues = [LEDGER_QUEUE] + ([DLQ_QUEUE] if cfg.dlq else [])
            snap = await snapshot.take(self.dsn, queues)
            totals = await self.dlq_route_totals() if cfg.dlq else {}
            (self.run_dir / "snapshot.json").write_text(json.dumps(
                {"snapshot": snap.dump(), "dlq_route_totals": totals, "config": {
                    "lease_seconds": cfg.lease_seconds, "ledger_queue": LEDGER_QUEUE,
                    "groups": list(cfg.groups), "dlq_queue": DLQ_QUEUE if cfg.dlq else None}}))
            result["serve_starts"] = {i.name: i.starts for i in self.instances}
        finally:
            await self.teardown()
        records = list(read_all(self.run_dir))
        figures, table, examples = check(Inputs(
            records, snap, cfg.lease_seconds, LEDGER_QUEUE, list(cfg.groups),
            DLQ_QUEUE if cfg.dlq else None, totals, dlq.kind_of))
        if cfg.brokers > 1:
            result["wake"] = wake_summary(records)
            figures["wake_missed"] = result["wake"]["missed"]
        if result["drain_s"] is None:
            figures["drain_timed_out"] = 1
        result.update(figures=figures, faults=table, examples=examples,
                      snapshot=snap.to_json())
        max_recovery = self.ha.layout.ttl + HA_RECOVERY_SLACK_S if self.ha else None
        result["max_recovery_bound_s"] = max_recovery or MAX_RECOVERY_S
        result["failed_figures"] = verdict(figures, max_recovery) + (
            ["wake_missed"] if figures.get("wake_missed") else []) + (
            ["drain_timed_out"] if figures.get("drain_timed_out") else [])
        result["passed"] = not result["failed_figures"]
        path = cfg.out_dir / f"faults-{self.run_id}.json"
        path.write_text(json.dumps(result, indent=1, default=str))
        result["json_path"] = str(path)
        return result


async def run(cfg: RunConfig) -> dict[str, Any]:
    return await Run(cfg).execute()
