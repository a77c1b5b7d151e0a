"""`python -m loadtest`: run workloads, ceilings and peers; install peers on request.

Self-contained (default): a durable embedded PostgreSQL in a temp dir, a fresh database and a
fresh broker per cell, ceilings in the same run. Against an operator's broker: `--url`
(and `--database-url` for commit/WAL counters and the L-SQL ceiling, which then writes
`lsql-*` queues into that database).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from loadtest import launch
from loadtest.ceilings import Ceilings
from loadtest.cell import Target, measure
from loadtest.corpus import build_corpus
from loadtest.report import RESULTS, write
from loadtest.workloads import add_knobs, cells


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run workloads W1..W4 with ceilings")
    run.add_argument("workloads", nargs="+", choices=("W1", "W2", "W3", "W4"))
    run.add_argument("--url", help="an already running broker (127.0.0.1 only)")
    run.add_argument("--database-url", help="the database of --url, for counters and L-SQL")
    run.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                     help="broker and L-HTTP web workers (self-contained runs)")
    run.add_argument("--no-ceilings", action="store_true", help="skip L-SQL and L-HTTP")
    run.add_argument("--ceiling-seconds", type=float, default=6.0)
    run.add_argument("--peer", nargs="*", default=[], choices=("rabbitmq", "pgmq"),
                     help="also measure peers on W2 (install them first: install-peer)")
    run.add_argument("--no-gate", action="store_true", help="skip the correctness gate")
    run.add_argument("--out", help="results directory (default loadtest/results)")
    run.add_argument("--repeat", type=int, default=1,
                     help="runs per cell; the median is reported with the range")
    run.add_argument("--profile", action="store_true",
                     help="sample the broker with py-spy and read pg_stat_statements per "
                          "cell (results/<run>-<cell>.profile.txt)")
    run.add_argument("--broker-root", type=Path,
                     help="run the broker from another checkout (before/after comparisons)")
    add_knobs(run)
    sub.add_parser("corpus", help="describe the corpus (size, zstd ratio)")
    inst = sub.add_parser("install-peer", help="install a peer for comparison (opt-in)")
    inst.add_argument("peer", choices=("rabbitmq", "pgmq"))
    from loadtest.probes import PROBES

    probe = sub.add_parser(
        "probe", help="measure one feature's cost (loadtest/probes/)",
        description="\n".join(f"{name:18} {what}" for name, what in PROBES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    probe.add_argument("name", choices=PROBES, metavar="NAME")
    probe.add_argument("options", nargs=argparse.REMAINDER,
                       help="the probe's own (python -m loadtest probe NAME --help)")
    from loadtest.faults import command as faults_command
    from loadtest.faults import soak

    faults_command.add_parser(sub)
    soak.add_parser(sub)
    from loadtest import kafka_cell

    kafka_cell.add_parser(sub)
    from loadtest import scale

    scale.add_parser(sub)
    from loadtest import citus_cell

    citus_cell.add_parser(sub)
    from loadtest import cost

    cost.add_parser(sub)
    return p


@contextlib.contextmanager
def _target(args: argparse.Namespace, pg: launch.Postgres | None) -> Iterator[Target]:
    if args.url:
        from urllib.parse import urlsplit

        from loadtest.procs import pid_listening_on, postmaster_pid

        port = urlsplit(args.url).port or 80
        data_dir = (asyncio.run(__import__("loadtest.pgstats", fromlist=["x"]).data_dir(
            args.database_url)) if args.database_url else None)
        yield Target(args.url, args.database_url,
                     {"broker": pid_listening_on(port), "postgres": postmaster_pid(data_dir)})
        return
    assert pg is not None
    root = args.broker_root or launch.ROOT
    # Another checkout migrates the fresh database itself, with its own schema.
    url = str(asyncio.run(launch.fresh_database(pg.dsn, migrate=args.broker_root is None)))
    with launch.broker(url, args.workers, root=root) as srv:
        yield Target(srv.url, url, {"broker": srv.proc.pid if srv.proc else None,
                                    "postgres": pg.proc.pid if pg.proc else None})


def _ratios(cell: dict[str, Any], name: str, shape: Any, ceil: Ceilings | None) -> None:
    t = cell.get("throughput")
    if not t or ceil is None:
        return
    r: dict[str, float] = {}
    push = t["steady_push_msg_per_s"]
    deliver = t["steady_deliver_msg_per_s"]
    if name == "W2" and t.get("steps"):
        deliver = t["best_ok_deliver_msg_per_s"]  # loadtest.cell.summarize
    if name in ("W1", "W4"):
        sql = ceil.sql_push(shape.batch, connections=shape.connections,
                            partitions=shape.partitions)
        if sql:
            r[f"push / L-SQL N={shape.batch}"] = push / sql["msg_per_s"]
            cell["ceiling_msg_per_s"] = sql["msg_per_s"]
        if name == "W4" and shape.batch == 1:
            for fused in (4, 8):
                f = ceil.sql_push(1, fused=fused, connections=shape.connections,
                                  partitions=shape.partitions)
                if f:
                    r[f"push / L-SQL N=1 fused={fused}"] = push / f["msg_per_s"]
        http = ceil.http_push(shape)
        r["push req/s / L-HTTP req/s"] = (push / shape.batch) / http["req_per_s"]
    if name in ("W2", "W3") and shape.groups:
        sql = ceil.sql_pop_ack(shape.pop_batch)
        if sql:
            groups = len(shape.groups)
            r[f"deliveries / ({groups} x L-SQL pop+ack)"] = deliver / (groups * sql["msg_per_s"])
            cell.setdefault("ceiling_msg_per_s", sql["msg_per_s"] * groups)
        if name == "W2":
            p = ceil.sql_push(shape.batch, connections=shape.connections,
                              partitions=shape.partitions)
            if p:
                r[f"push / L-SQL N={shape.batch}"] = push / p["msg_per_s"]
        http = ceil.http_pop(shape.consumers_per_group * len(shape.groups), shape.pop_batch)
        r["deliveries / L-HTTP pop msg/s"] = deliver / http["msg_per_s"]
    cell["ratios"] = {k: round(v, 3) for k, v in r.items()}


def _across_cells(result: dict[str, Any]) -> None:
    """Ratios that compare cells of one workload: wire modes, W3 fan-out and W4 partition
    count."""
    by = {c["cell"]: c.get("throughput") for c in result["cells"]}
    for label, t in by.items():
        base, _, wire = label.partition(" wire=")
        json_cell = by.get(base)
        if not (wire and t and json_cell):
            continue
        for key, what in (("steady_push_msg_per_s", "push"),
                          ("steady_deliver_msg_per_s", "delivered")):
            if json_cell[key] and t[key]:
                result.setdefault("cross", {})[f"{base}: {what} {wire} / json"] = round(
                    t[key] / json_cell[key], 3)
        mine, theirs = (t.get("best_ok_deliver_msg_per_s"),
                        json_cell.get("best_ok_deliver_msg_per_s"))
        if mine and theirs:
            result.setdefault("cross", {})[f"{base}: best ok delivery {wire} / json"] = round(
                mine / theirs, 3)
    raw, official = by.get("W2 balanced"), by.get("W2 official consume()")
    if raw and official and raw.get("best_ok_deliver_msg_per_s"):
        result.setdefault("cross", {})["W2 best ok delivery: official consume() / raw"] = round(
            (official.get("best_ok_deliver_msg_per_s") or 0)
            / raw["best_ok_deliver_msg_per_s"], 3)
    by = {k: v for k, v in by.items() if " wire=" not in k}
    w3 = {int(k.split("=")[1]): v for k, v in by.items() if k.startswith("W3 groups=") and v}
    if 1 in w3:
        for g, t in w3.items():
            if g != 1 and w3[1]["steady_deliver_msg_per_s"]:
                result.setdefault("cross", {})[f"W3 deliveries {g} groups / 1 group"] = round(
                    t["steady_deliver_msg_per_s"] / w3[1]["steady_deliver_msg_per_s"], 3)
                result["cross"][f"W3 producer kept at {g} groups"] = round(
                    t["steady_push_msg_per_s"] / max(1e-9, w3[1]["steady_push_msg_per_s"]), 3)
    w4 = {int(k.split("=")[1]): v for k, v in by.items() if k.startswith("W4 partitions=") and v}
    low = min(w4, default=None)
    for p, t in w4.items():
        if low is not None and p != low:
            for key in ("steady_push_msg_per_s", "steady_deliver_msg_per_s"):
                base = w4[low][key]
                if base:
                    result.setdefault("cross", {})[
                        f"W4 {key.split('_')[1]} drop {low} -> {p} partitions"] = round(
                        1 - t[key] / base, 3)


def _repeat(args: argparse.Namespace, target_args: Any, shape: Any, label: str,
            name: str, run_id: str) -> dict[str, Any]:
    """Run a cell `--repeat` times; keep the median run, record every run's figure."""
    runs = []
    for i in range(max(1, args.repeat)):
        profile_to = None
        if args.profile:
            out_dir = Path(args.out) if args.out else RESULTS
            out_dir.mkdir(parents=True, exist_ok=True)
            profile_to = out_dir / f"{run_id}-{re.sub(r'[^A-Za-z0-9]+', '-', label)}-{i}.profile.txt"
        with _target(args, target_args) as target:
            runs.append(measure(target, shape, label if args.repeat <= 1 else f"{label} #{i + 1}",
                                gate=not args.no_gate, profile_to=profile_to))
    failed = [r for r in runs if r["verdict"] != "ok"]
    if failed:
        return failed[0]  # one failing repeat fails the cell
    key = "steady_deliver_msg_per_s" if shape.groups else "steady_push_msg_per_s"
    runs.sort(key=lambda r: r["throughput"][key])
    chosen = runs[len(runs) // 2]
    chosen["cell"] = label
    if len(runs) > 1:
        values = [r["throughput"][key] for r in runs]
        chosen["repeats"] = {"figure": key, "values": values, "median": chosen["throughput"][key],
                             "range": [values[0], values[-1]]}
    return chosen


def _cannot_run(shape: Any) -> str | None:
    """Why a cell cannot run here (a client library it needs is missing), or None."""
    import importlib.util

    if shape.consumer == "official" and importlib.util.find_spec("queen") is None:
        return ("the official client is not installed (queen-mq==2.6.0, "
                "pip install -e '.[loadtest]')")
    return None


def run(args: argparse.Namespace) -> int:
    run_id = time.strftime("%Y%m%d-%H%M%S")
    corpus = build_corpus(seed=args.seed or 42, message_bytes=args.message_bytes or 1024)
    result: dict[str, Any] = {
        "run_id": run_id, "target": args.url or "self-contained (durable embedded PostgreSQL)",
        "workers": args.workers, "argv": sys.argv,
        "corpus": {"messages": len(corpus.bodies), "mean_bytes": corpus.mean_bytes,
                   "zstd_ratio": round(corpus.zstd_ratio, 3)},
        "cells": [], "ceilings": {}, "peers": []}
    with contextlib.ExitStack() as stack:
        pg = None if args.url else stack.enter_context(launch.Postgres())
        ceil = None if args.no_ceilings else Ceilings(
            pg.dsn if pg else None, args.database_url, args.workers, args.ceiling_seconds)
        w1_batch10 = 0.0
        for name in args.workloads:
            for label, shape in cells(name, args, run_id):
                if name == "W3" and not args.rate and w1_batch10:
                    from dataclasses import replace
                    shape = replace(shape, rate=w1_batch10 / 2)  # half of W1's batch-10 max
                missing = _cannot_run(shape)
                if missing:  # say why instead of failing the cell's gate
                    print(f"{label}: skipped: {missing}", file=sys.stderr)
                    result.setdefault("skipped", []).append({"cell": label, "reason": missing})
                    continue
                cell = _repeat(args, pg, shape, label, name, run_id)
                if name == "W1" and shape.batch == 10 and cell.get("throughput"):
                    w1_batch10 = cell["throughput"]["steady_push_msg_per_s"]
                _ratios(cell, name, shape, ceil)
                result["cells"].append(cell)
                print(f"{label}: {cell['verdict']} {cell.get('throughput', {})}", file=sys.stderr)
        if "W2" in args.workloads and args.peer:
            from loadtest.peers.common import measure_peer

            w2 = next(c for c in result["cells"] if c["cell"].startswith("W2"))
            mine = (w2.get("throughput") or {}).get("best_ok_deliver_msg_per_s")
            for peer in args.peer:
                figure = measure_peer(peer, pg, args)
                result["peers"].append(figure)
                theirs = figure.get("msg_per_s")
                w2.setdefault("peer_msg_per_s", {})[peer] = theirs
                if mine and theirs:
                    w2.setdefault("ratios", {})[f"best ok delivery / {peer}"] = round(
                        mine / theirs, 3)
                ours_pg = (w2.get("cpu_us_per_delivered") or {}).get("postgres")
                theirs_pg = (figure.get("cpu_us_per_delivered") or {}).get("postgres")
                if ours_pg and theirs_pg:  # PostgreSQL CPU per delivered message, same run
                    w2.setdefault("ratios", {})[f"PostgreSQL us/delivered / {peer}'s"] = round(
                        ours_pg / theirs_pg, 3)
        if ceil is not None:
            result["ceilings"] = ceil.results
    _across_cells(result)
    paths = write(result, run_id, **({"out_dir": __import__("pathlib").Path(args.out)}
                                     if args.out else {}))
    print(paths["txt"].read_text())
    print("written: " + ", ".join(str(p) for p in paths.values()))
    return 0 if all(c["verdict"] == "ok" for c in result["cells"]) else 1


# Subcommands run by a function of their own module, given the parsed arguments.
_COMMANDS = {
    "faults": ("loadtest.faults.command", "main"),
    "kafka": ("loadtest.kafka_cell", "command"),
    "cost": ("loadtest.cost", "command"),
    "scale": ("loadtest.scale", "command"),
    "citus": ("loadtest.citus_cell", "command"),
    "soak": ("loadtest.faults.soak", "main"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "corpus":
        c = build_corpus()
        print(f"{len(c.bodies)} messages, mean {c.mean_bytes:.0f} B, zstd-1 ratio "
              f"{c.zstd_ratio:.2f}")
        return 0
    if args.command in _COMMANDS:
        # Imported when asked for: each pulls in what only it needs (clients, peers, Citus).
        module, function = _COMMANDS[args.command]
        return int(getattr(importlib.import_module(module), function)(args))
    if args.command == "probe":
        from loadtest import probes

        return probes.run(args.name, args.options)
    if args.command == "install-peer":
        from loadtest.peers.install import install

        return install(args.peer)
    if args.url and not args.url.startswith(("http://127.0.0.1", "http://localhost")):
        print("loadtest: --url must be a broker on this machine (127.0.0.1)", file=sys.stderr)
        return 2
    return run(args)
