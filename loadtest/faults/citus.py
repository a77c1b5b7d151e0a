"""`--database citus`: the ledger on a Citus cluster (broker/citus.py), and its faults.

The harness runs a coordinator and two workers from a directory of its own, on ports of its
own, and gives `serve` the cluster's DATABASE_URL (every node, the coordinator first: the
broker's log pool goes to the workers, its control plane and LISTEN/NOTIFY to the
coordinator, core/storage/cluster.py). Faults:

- `citus_worker_kill`: kill -9 of one worker's postmaster. PostgreSQL does not restart a
  postmaster that died (a service manager does): the harness starts it again after
  `pg_downtime`. Meanwhile the partitions whose shards live on that worker answer 503 and
  the others keep serving; `ready_at` is when the worker accepts connections again.
- `citus_worker_freeze`: SIGSTOP of one worker's postmaster and every backend under it for
  `FREEZE_SECONDS`, as a hung machine whose sockets stay open: nothing fails, statements
  there just do not answer. The partitions on it answer 503 once their statements' time is
  up; the wake-up notifications that worker carried go through another one meanwhile
  (core/engine/wake_nodes.py), so answers elsewhere are not held for it.
- `citus_add_worker`: a new worker joins under load and `citus_rebalance_start()` moves
  shards to it online (logical replication; writes to a shard wait only at its cutover);
  the fault lasts until the rebalance is over (`rebalance_s`, `shards_moved`).

The broker runs with its shipped settings: nothing here shortens a timeout for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import asyncpg
import psutil  # type: ignore[import-untyped]

from broker.citus import DATABASE, CitusCluster, CitusNode
from core.waiting import within
from loadtest.faults.base import Healer
from loadtest.faults.servers import ServeInstance

CITUS_FAULTS = ("citus_worker_kill", "citus_worker_freeze", "citus_add_worker")
FREEZE_SECONDS = 10.0
SHARDS = 16
REBALANCE_TIMEOUT_S = 600.0


class CitusNodes:
    """A coordinator and two workers, as pg_ctl-run servers of the harness."""

    def __init__(self, root: Path, settings: dict[str, str]) -> None:
        self.cluster = CitusCluster.load_or_new(root, workers=2, shards=SHARDS, settings=settings)
        self.added = 0  # workers added by citus_add_worker so far

    @property
    def dsn(self) -> str:
        return self.cluster.dsn()

    def start(self) -> None:
        self.cluster.up()

    def stop(self) -> None:
        self.cluster.down()

    async def shards_per_node(self) -> dict[str, int]:
        conn = await asyncpg.connect(self.cluster.coordinator.dsn(DATABASE))
        try:
            rows = await conn.fetch(
                "SELECT nodeport, count(*) FROM pg_dist_placement p"
                "  JOIN pg_dist_node n USING (groupid)"
                "  JOIN pg_dist_shard s USING (shardid)"
                " WHERE s.logicalrelid = 'queen.log_partitions'::regclass GROUP BY 1")
        finally:
            await conn.close()
        ports = {n.port: n.name for n in self.cluster.nodes}
        return {ports.get(int(port), str(port)): int(count) for port, count in rows}


async def citus_worker_kill(injector: Healer, inst: ServeInstance, nodes: CitusNodes
                            ) -> dict[str, Any]:
    worker: CitusNode = injector.rng.choice(nodes.cluster.workers)
    pid = nodes.cluster.postmaster_pid(worker)
    rec: dict[str, Any] = {"target": f"{worker.name} postmaster", "pid": pid,
                           "injected_at": time.time()}
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    await asyncio.sleep(injector.run.cfg.pg_downtime)
    await asyncio.to_thread(nodes.cluster.start, worker, 120.0)
    rec["ready_at"] = time.time()
    return await injector.finish(rec, inst, since=rec["ready_at"])


async def citus_worker_freeze(injector: Healer, inst: ServeInstance, nodes: CitusNodes
                              ) -> dict[str, Any]:
    worker: CitusNode = injector.rng.choice(nodes.cluster.workers)
    pid = nodes.cluster.postmaster_pid(worker)
    rec: dict[str, Any] = {"target": f"{worker.name} node", "pid": pid,
                           "stopped_s": FREEZE_SECONDS, "injected_at": time.time()}
    frozen = _tree(pid)
    for proc in frozen:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGSTOP)
    try:
        await asyncio.sleep(FREEZE_SECONDS)
    finally:
        # The tree again: a backend forked just before the postmaster stopped is resumed too.
        for proc in {p.pid: p for p in [*frozen, *_tree(pid)]}.values():
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGCONT)
    rec["resumed_at"] = time.time()
    return await injector.finish(rec, inst, since=rec["resumed_at"])


def _tree(pid: int | None) -> list[psutil.Process]:
    """A postmaster and every process under it (its backends and auxiliary processes)."""
    if pid is None:
        return []
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


async def citus_add_worker(injector: Healer, inst: ServeInstance, nodes: CitusNodes
                           ) -> dict[str, Any]:
    rec: dict[str, Any] = {"injected_at": time.time(),
                           "shards_before": await nodes.shards_per_node()}
    node = await asyncio.to_thread(nodes.cluster.add_worker)
    nodes.added += 1
    rec["target"] = node.name
    rec["joined_at"] = time.time()
    conn = await asyncpg.connect(nodes.cluster.coordinator.dsn(DATABASE))
    try:
        started = time.monotonic()
        await conn.execute("SELECT citus_rebalance_start()")
        await within(REBALANCE_TIMEOUT_S, conn.execute("SELECT citus_rebalance_wait()"))
        rec["rebalance_s"] = round(time.monotonic() - started, 3)
    finally:
        await conn.close()
    rec["shards_after"] = await nodes.shards_per_node()
    rec["shards_moved"] = rec["shards_after"].get(node.name, 0)
    return await injector.finish(rec, inst, since=time.time())
