"""`python -m loadtest citus`: the broker on Citus clusters of 1, 2 and 3 workers, against one
PostgreSQL, on the same offered load (docs/scale-out.md reads its figures).

Each cluster is made afresh (broker/citus.py, durable settings: fsync and synchronous commit
on), with the broker's log pool spread over its workers; the cells are W2 (batch 10 over 100
partitions, one group) and W4 (batch 1 over 100 partitions), each at a fixed offered rate so
that every configuration does the same work, after its partitions and its group's cursors
were made (loadtest/warm.py: a one-off cost the steady state does not pay; `--no-warm`
counts it in). Per cell it reports, per delivered message, the
CPU of the coordinator, of every worker and of the broker (psutil over each process tree),
and the statements Citus ran on each node (citus_stat_counters: single-shard and
multi-shard) and the two-phase commits (pg_dist_transaction). The baseline runs the same
cells on one durable embedded PostgreSQL.

On one machine the nodes share its cores, so throughput cannot grow with workers; what the
cell checks is the cost per message: the workers' CPU per message should not grow with
their number, and the coordinator's should stay a small share of one PostgreSQL's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg

from broker.citus import DATABASE, CitusCluster, CitusNotFound
from loadtest import launch
from loadtest.cell import Target, measure
from loadtest.coordinator_profile import PRELOAD, CoordinatorProfile
from loadtest.coordinator_profile import render as render_profile
from loadtest.runner import Shape
from loadtest.warm import warm

RESULTS = launch.ROOT / "loadtest" / "results"
# Durable, and no recovery of two-phase commit records during a run: pg_dist_transaction
# keeps one per two-phase commit, which the cell counts (recovery would remove them).
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on",
           "citus.recover_2pc_interval": "-1"}
SHARDS = 32


def add_parser(sub: Any) -> None:
    p = sub.add_parser("citus", help="W2 and W4 on Citus clusters of 1..3 workers vs one "
                                     "PostgreSQL: CPU and statements per message per node")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3],
                   help="cluster sizes (workers besides the coordinator)")
    p.add_argument("--cells", nargs="+", default=["W2", "W4"], choices=["W2", "W4"])
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--w2-rate", type=float, default=800.0, help="W2 offered msg/s")
    p.add_argument("--w4-rate", type=float, default=300.0, help="W4 offered msg/s")
    p.add_argument("--broker-workers", type=int, default=2)
    p.add_argument("--no-baseline", action="store_true", help="skip the one-PostgreSQL run")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--no-warm", action="store_true",
                   help="count the creation of each cell's partitions and cursors in its "
                        "window (by default they are made before it: loadtest/warm.py)")
    p.add_argument("--profile-coordinator", action="store_true",
                   help="also read what the coordinator spends its CPU on, per process and "
                        "per statement (loads pg_stat_statements on every node: compare "
                        "CPU figures with runs profiled too)")


def shapes(args: argparse.Namespace, run_id: str) -> dict[str, Shape]:
    """W2 and W4 at the rates given: 100 partitions, one group, two producer and two consumer
    processes each."""
    out = {}
    if "W2" in args.cells:
        out["W2"] = Shape(queue=f"w2-{run_id}", connections=16, batch=10,
                          consumers_per_group=8, pop_batch=100, pop_partitions=4,
                          rate=args.w2_rate, duration=args.duration, partitions=100,
                          groups=("g1",), producer_procs=2, consumer_procs=2)
    if "W4" in args.cells:
        out["W4"] = Shape(queue=f"w4-{run_id}", connections=32, batch=1,
                          consumers_per_group=8, pop_batch=100, pop_partitions=8,
                          rate=args.w4_rate, duration=args.duration, partitions=100,
                          groups=("g1",), producer_procs=2, consumer_procs=2)
    return out


@contextmanager
def citus_cluster(workers: int, *, profiled: bool = False) -> Iterator[CitusCluster]:
    root = Path(tempfile.mkdtemp(prefix="queen-citus-load-"))
    settings = {**DURABLE, **({"shared_preload_libraries": PRELOAD} if profiled else {})}
    cluster = CitusCluster.load_or_new(root, workers=workers, shards=SHARDS, settings=settings)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)


async def _counters(cluster: CitusCluster) -> dict[str, dict[str, int]]:
    out = {}
    for node in cluster.nodes:
        conn = await asyncpg.connect(node.dsn(DATABASE))
        try:
            row = await conn.fetchrow(
                "SELECT query_execution_single_shard, query_execution_multi_shard"
                "  FROM citus_stat_counters WHERE name = current_database()")
            assert row is not None
            out[node.name] = {"single_shard": int(row[0]), "multi_shard": int(row[1]),
                              "two_phase": int(await conn.fetchval(
                                  "SELECT count(*) FROM pg_dist_transaction"))}
        finally:
            await conn.close()
    return out


def _per_message(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]],
                 messages: int) -> dict[str, dict[str, float]]:
    return {node: {k: round((after[node][k] - before[node].get(k, 0)) / max(messages, 1), 3)
                   for k in after[node]} for node in after}


def run_on_citus(workers: int, cells: dict[str, Shape], broker_workers: int, *,
                 profiled: bool = False, warmed: bool = True) -> list[dict[str, Any]]:
    import asyncio

    results = []
    with citus_cluster(workers, profiled=profiled) as cluster:
        dsn = cluster.dsn()
        with launch.broker(dsn, broker_workers) as srv:
            roots: dict[str, int | None] = {
                "broker": srv.proc.pid if srv.proc else None,
                **{n.name: cluster.postmaster_pid(n) for n in cluster.nodes}}
            for name, shape in cells.items():
                label = f"{name} citus workers={workers}"
                shape = replace(shape, queue=f"{shape.queue}-c{workers}")
                warm_messages = asyncio.run(warm(srv.url, shape)) if warmed else None
                profile = None
                if profiled:
                    pid = cluster.postmaster_pid(cluster.coordinator)
                    assert pid is not None
                    profile = CoordinatorProfile(cluster.coordinator.dsn(DATABASE), pid)
                    profile.start()
                before = asyncio.run(_counters(cluster))
                cell = measure(Target(srv.url, None, roots), shape, label)
                cell["warm_messages"] = warm_messages
                after = asyncio.run(_counters(cluster))
                delivered = sum(int(g.get("delivered") or 0)
                                for g in cell["gate"]["groups"] if g.get("group") != "fetch")
                cell["citus_per_message"] = _per_message(before, after, delivered)
                if profile is not None:
                    cell["coordinator_profile"] = profile.stop(delivered)
                cell["workers"] = workers
                results.append(cell)
    return results


def run_on_postgres(cells: dict[str, Shape], broker_workers: int, *,
                    warmed: bool = True) -> list[dict[str, Any]]:
    import asyncio

    results = []
    with launch.Postgres() as pg:
        url = str(asyncio.run(launch.fresh_database(pg.dsn)))
        with launch.broker(url, broker_workers) as srv:
            roots = {"broker": srv.proc.pid if srv.proc else None,
                     "postgres": pg.proc.pid if pg.proc else None}
            for name, shape in cells.items():
                shape = replace(shape, queue=f"{shape.queue}-pg")
                warm_messages = asyncio.run(warm(srv.url, shape)) if warmed else None
                cell = measure(Target(srv.url, url, roots), shape, f"{name} one PostgreSQL")
                cell["warm_messages"] = warm_messages
                cell["workers"] = 0
                results.append(cell)
    return results


def summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures the issue asks for: workers' CPU per message at each size, against one
    worker, and the coordinator's against one PostgreSQL's."""
    out: dict[str, Any] = {}
    for name in ("W2", "W4"):
        mine = [c for c in cells if c["cell"].startswith(name)]
        if not mine:
            continue
        rows = {}
        for c in mine:
            cpu = c.get("cpu_us_per_delivered") or {}
            workers = {k: v for k, v in cpu.items() if k.startswith("worker")}
            rows[c["workers"]] = {
                "workers_cpu_us_per_msg": round(sum(workers.values()), 1),
                "per_worker_cpu_us_per_msg": workers,
                "coordinator_cpu_us_per_msg": cpu.get("coordinator"),
                "postgres_cpu_us_per_msg": cpu.get("postgres"),
                "broker_cpu_us_per_msg": cpu.get("broker"),
                "verdict": c.get("verdict"),
            }
        one = rows.get(1, {}).get("workers_cpu_us_per_msg")
        pg = rows.get(0, {}).get("postgres_cpu_us_per_msg")
        for n, row in rows.items():
            if n and one:
                row["workers_cpu_vs_1_worker"] = round(row["workers_cpu_us_per_msg"] / one, 3)
            if n and pg and row.get("coordinator_cpu_us_per_msg") is not None:
                row["coordinator_cpu_vs_one_postgres"] = round(
                    row["coordinator_cpu_us_per_msg"] / pg, 3)
        out[name] = rows
    return out


def command(args: argparse.Namespace) -> int:
    run_id = time.strftime("citus-%Y%m%d-%H%M%S")
    cells = shapes(args, run_id)
    results: list[dict[str, Any]] = []
    try:
        if not args.no_baseline:
            results += run_on_postgres(cells, args.broker_workers, warmed=not args.no_warm)
        for workers in args.workers:
            results += run_on_citus(workers, cells, args.broker_workers,
                                    profiled=args.profile_coordinator,
                                    warmed=not args.no_warm)
    except CitusNotFound as exc:
        print(f"loadtest citus: {exc}", file=sys.stderr)
        return 1
    report = {"run_id": run_id,
              "command": " ".join(["python -m loadtest", *sys.argv[1:]]), "cells": results,
              "summary": summary(results)}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{run_id}.json"
    path.write_text(json.dumps(report, indent=2, default=str))
    text = text_report(report)
    path.with_suffix(".txt").write_text(text)
    print(text)
    print(f"written: {path} and {path.with_suffix('.txt').name}")
    return 0


def text_report(report: dict[str, Any]) -> str:
    """The figures of a run as a table per cell: CPU per delivered message of each process,
    the ratios the issue's targets name, and Citus's statements per message per node."""
    lines = [f"loadtest citus {report['run_id']}", f"command: {report['command']}", ""]
    for name, rows in report["summary"].items():
        lines.append(f"{name}: CPU us per delivered message")
        lines.append(f"{'workers':>8} {'database':>10} {'vs 1 worker':>12} "
                     f"{'coordinator':>12} {'vs one PG':>10} {'broker':>8}  verdict")
        for n in sorted(rows, key=int):
            row = rows[n]
            database = (row["postgres_cpu_us_per_msg"] if int(n) == 0
                        else row["workers_cpu_us_per_msg"])
            lines.append(f"{n:>8} {database or 0:>10.1f} "
                         f"{row.get('workers_cpu_vs_1_worker') or '':>12} "
                         f"{row.get('coordinator_cpu_us_per_msg') or '':>12} "
                         f"{row.get('coordinator_cpu_vs_one_postgres') or '':>10} "
                         f"{row.get('broker_cpu_us_per_msg') or 0:>8.1f}  {row['verdict']}")
        lines.append("")
    lines.append("Citus statements per delivered message, per node "
                 "(single-shard, multi-shard, two-phase records)")
    for cell in report["cells"]:
        per = cell.get("citus_per_message")
        if not per:
            continue
        steady = cell.get("throughput", {})
        lines.append(f"  {cell['cell']} (delivered {steady.get('steady_deliver_msg_per_s')} "
                     f"msg/s steady)")
        for node, counts in per.items():
            lines.append(f"    {node:<12} {counts['single_shard']:>8} "
                         f"{counts['multi_shard']:>8} {counts['two_phase']:>8}")
        if cell.get("coordinator_profile"):
            lines += render_profile(cell["coordinator_profile"])
    return "\n".join(lines) + "\n"
