"""`python -m loadtest cost`: the cost cell, server CPU per message on Queen's soak shape.

Queen 1.0's release benchmark ran its 24-hour soak shape (200 partitions, pushes of 100
messages, pops of 500, manual acks, dedup on) at 600,000 msg/s on 32 cores, PostgreSQL
using 3.4 cores and its broker 10.6: about 5.7 µs of PostgreSQL and 17.7 µs of broker CPU
per message, push, pop and ack together (`QUEEN_US`, the anchor every figure here is put
beside). This cell runs the same shape against our broker and reports what one message
costs the server:

* **CPU per message**, broker and PostgreSQL apart (psutil over each process tree, from the
  first push to the end of the drain, divided by the messages delivered and acknowledged):
  the whole life of a message, as Queen's figure is;
* the broker's share **by layer** (py-spy over its web workers: the HTTP stack, msgspec,
  our edge, the core, zstd, the driver; loadtest/profile.py says how a sample is placed);
* PostgreSQL's share **by statement kind** (pg_stat_statements: calls, execution time and
  WAL bytes per message of the append, the claim, the ack and the rest), commits and WAL
  bytes per message;
* the **messages per pop** the consumers got, so a reader sees how full the pops were.

Each round runs, for every side (this checkout; and the other, `--compare-root`'s or this
one with `--compare-workers` web workers) and every consumer (`raw`: the load tool's lean
consumer; `official`: the official client's `consume()`), one cell on a fresh database of
one durable embedded PostgreSQL and a fresh broker: producers push `--messages` messages as
fast as they are answered (closed loop), the consumers drain them, and the gate checks every
message arrived once. The sides' order alternates from round to round. Reported: medians
and ranges over rounds, and same-run ratios (this side against the other, per round;
official against raw; each against Queen's anchor).

Writes `loadtest/results/cost-<run>.json` and `.txt` (also printed), the profiles beside
them. Everything runs on 127.0.0.1; only processes this command started are stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from loadtest import launch, profile
from loadtest.cell import Target, measure
from loadtest.report import RESULTS
from loadtest.runner import Shape

# Queen 1.0's soak at 600,000 msg/s: 10.6 broker cores and 3.4 PostgreSQL cores.
QUEEN_US = {"broker": round(10.6 / 600_000 * 1e6, 1), "postgres": round(3.4 / 600_000 * 1e6, 1)}
QUEEN_US["server"] = round(QUEEN_US["broker"] + QUEEN_US["postgres"], 1)
CONSUMERS = ("raw", "official")
# The broker's statements by what they do, recognised by the function they call (the rest:
# notifications, counters, sweeps, and the few reads of this tool). `ack_whole`: the acks of
# whole deliveries (queen.ack_spans, core/engine/ack_spans.py), apart from the general
# path's so that a run says how many acks took each; the acks' cost is the two summed.
_KINDS = (("push", "queen.append_partitions("), ("push", "queen.append("),
          ("pop", "queen.pop_ready("), ("ack_whole", "queen.ack_spans("),
          ("ack", "queen.ack("), ("notify", "pg_notify("))


def statement_kind(query: str) -> str:
    for kind, marker in _KINDS:
        if marker in query:
            return kind
    return "other"


async def statements_by_kind(url: str) -> dict[str, dict[str, float]]:
    """Calls, execution time (ms) and WAL bytes of the statements the broker sent (top
    level), summed by kind, since the last reset."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            """SELECT query, calls, total_exec_time, wal_bytes FROM pg_stat_statements
                WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND toplevel""")
    except asyncpg.PostgresError:  # pg_stat_statements not loaded
        return {}
    finally:
        await conn.close()
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        kind = out.setdefault(statement_kind(row["query"]),
                              {"calls": 0, "exec_ms": 0.0, "wal_bytes": 0})
        kind["calls"] += row["calls"]
        kind["exec_ms"] += row["total_exec_time"]
        kind["wal_bytes"] += int(row["wal_bytes"])
    return out


def shape_of(args: argparse.Namespace, queue: str, consumer: str) -> Shape:
    return Shape(queue=queue, duration=args.max_seconds, connections=args.connections,
                 batch=args.batch, partitions=args.partitions, groups=("g1",),
                 consumers_per_group=args.consumers, pop_batch=args.pop_batch,
                 pop_partitions=args.pop_partitions, rate=0.0, max_messages=args.messages,
                 producer_procs=1, consumer_procs=min(2, args.consumers), consumer=consumer,
                 phased=args.phased)


@dataclass(frozen=True)
class Side:
    """What one side of the run measures: a checkout (None: this one) with its web workers."""

    name: str
    root: Path | None
    workers: int


def sides_of(args: argparse.Namespace) -> list[Side]:
    """`this`, and `other` when the run compares: another checkout (`--compare-root`) or
    this one with another number of web workers (`--compare-workers`), or both at once."""
    sides = [Side("this", None, args.workers)]
    if args.compare_root or args.compare_workers:
        sides.append(Side("other", args.compare_root.resolve() if args.compare_root else None,
                          args.compare_workers or args.workers))
    return sides


def _cell(args: argparse.Namespace, pg: launch.Postgres, side: Side, consumer: str,
          label: str, profile_to: Path | None) -> dict[str, Any]:
    """One cell on a fresh database and broker; answer its figures per message."""
    url = str(asyncio.run(launch.fresh_database(pg.dsn, migrate=side.root is None)))
    shape = shape_of(args, f"cost-{consumer}", consumer)
    with launch.broker(url, side.workers, root=side.root or launch.ROOT) as srv:
        target = Target(srv.url, url, {"broker": srv.proc.pid if srv.proc else None,
                                       "postgres": pg.proc.pid if pg.proc else None})
        asyncio.run(profile.reset_statements(url))
        cell = measure(target, shape, label, profile_to=profile_to)
        kinds = asyncio.run(statements_by_kind(url))
    return per_message(cell, kinds)


def per_message(cell: dict[str, Any], kinds: dict[str, dict[str, float]]) -> dict[str, Any]:
    """A measured cell's figures divided by its messages (delivered and acknowledged)."""
    groups = [g for g in cell["gate"]["groups"] if g["group"] != "fetch"]
    messages = sum(g["delivered"] for g in groups)
    out: dict[str, Any] = {"verdict": cell["verdict"], "messages": messages,
                           "gate": cell["gate"], "seconds": cell["seconds"],
                           "cpu_seconds": cell["cpu_seconds"]}
    if cell["verdict"] != "ok" or not messages:
        return out
    cpu = cell["cpu_seconds"]
    us = {k: round(cpu.get(k, 0.0) / messages * 1e6, 2) for k in ("broker", "postgres")}
    us["server"] = round(us["broker"] + us["postgres"], 2)
    out["us_per_message"] = us
    for phase, phase_cpu in (cell.get("phase_cpu_seconds") or {}).items():
        split = {k: round(phase_cpu.get(k, 0.0) / messages * 1e6, 2)
                 for k in ("broker", "postgres")}
        split["server"] = round(split["broker"] + split["postgres"], 2)
        out[f"{phase}_us_per_message"] = split
    out["generator_us_per_message"] = round(cpu.get("generator", 0.0) / messages * 1e6, 2)
    out["msg_per_s"] = round(messages / cell["seconds"], 1) if cell["seconds"] else None
    pops = [p for p in cell.get("series", []) if "pops" in p]
    if pops and pops[-1]["pops"] > pops[-1]["empty_pops"]:
        out["messages_per_pop"] = round(messages / (pops[-1]["pops"] - pops[-1]["empty_pops"]),
                                        1)
    if "db" in cell:
        out["commits_per_message"] = cell["db"]["commits_per_message"]
        out["wal_bytes_per_message"] = cell["db"]["wal_bytes_per_message"]
    out["statements_per_message"] = {k: round(v["calls"] / messages, 4)
                                     for k, v in sorted(kinds.items())}
    out["statement_us_per_message"] = {k: round(v["exec_ms"] * 1e3 / messages, 2)
                                       for k, v in sorted(kinds.items())}
    out["statement_wal_bytes_per_message"] = {k: round(v["wal_bytes"] / messages, 1)
                                              for k, v in sorted(kinds.items())}
    stacks = (cell.get("profile") or {}).get("stacks")
    if stacks:
        out["broker_layers_us"] = {name: round(share * us["broker"], 2)
                                   for name, share in stacks["layers"]}
        out["broker_own_top"] = stacks["own"][:15]
        out["profile"] = cell["profile"]["file"]
    return out


def _median_range(values: Sequence[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2),
            "max": round(max(values), 2)}


def summarize(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Medians and ranges per variant, and the same-run ratios."""
    variants = sorted({v for r in rounds for v in r})
    out: dict[str, Any] = {"variants": {}, "ratios": {}}
    for v in variants:
        cells = [r[v] for r in rounds if v in r and r[v].get("us_per_message")]
        if not cells:
            continue
        figures: dict[str, Any] = {k: _median_range([c["us_per_message"][k] for c in cells])
                                   for k in ("broker", "postgres", "server")}
        for phase in ("push", "consume"):
            if all(f"{phase}_us_per_message" in c for c in cells):
                figures[phase] = {k: _median_range([c[f"{phase}_us_per_message"][k]
                                                    for c in cells])
                                  for k in ("broker", "postgres", "server")}
        figures["queen_ratio"] = {k: round(figures[k]["median"] / QUEEN_US[k], 2)
                                  for k in QUEEN_US}
        out["variants"][v] = figures
    # Same round, same machine: this checkout / the other, official / raw.
    pairs = [(f"{c} this/other", f"this {c}", f"other {c}") for c in CONSUMERS]
    pairs += [(f"{side} official/raw", f"{side} official", f"{side} raw")
              for side in ("this", "other")]
    for name, a, b in pairs:
        for figure in ("us_per_message", "push_us_per_message", "consume_us_per_message"):
            per = {k: [r[a][figure][k] / r[b][figure][k] for r in rounds
                       if r.get(a, {}).get(figure) and r.get(b, {}).get(figure)
                       and r[b][figure][k]]
                   for k in ("broker", "postgres", "server")}
            if per["server"]:
                label = name if figure == "us_per_message" else \
                    f"{name} ({figure.split('_')[0]})"
                out["ratios"][label] = {k: _median_range(vals) for k, vals in per.items()}
    return out


def render(result: dict[str, Any]) -> str:
    lines = [f"cost {result['run_id']}: {result['shape']}",
             f"load average at start {result['load_start']}, at end {result['load_end']}",
             (f"Queen 1.0 anchor (600,000 msg/s, 32 cores): broker {QUEEN_US['broker']} + "
              f"PostgreSQL {QUEEN_US['postgres']} = {QUEEN_US['server']} µs per message")]
    for i, r in enumerate(result["rounds"]):
        lines.append(f"\nround {i + 1}")
        for name, c in r.items():
            if c.get("verdict") != "ok":
                lines.append(f"  [{name}] {c.get('verdict')}: {c.get('gate')}")
                continue
            us = c["us_per_message"]
            lines.append(f"  [{name}] {c['messages']} messages, {c['msg_per_s']} msg/s: "
                         f"server {us['server']} µs/msg = broker {us['broker']} + "
                         f"PostgreSQL {us['postgres']} (generator "
                         f"{c['generator_us_per_message']}); {c.get('messages_per_pop', '-')} "
                         f"msg/pop; commits/msg {c.get('commits_per_message')}, WAL B/msg "
                         f"{c.get('wal_bytes_per_message')}")
            for phase in ("push", "consume"):
                if f"{phase}_us_per_message" in c:
                    p = c[f"{phase}_us_per_message"]
                    lines.append(f"      {phase}: server {p['server']} µs/msg = broker "
                                 f"{p['broker']} + PostgreSQL {p['postgres']}")
            lines.append("      statements/msg " + _kv(c["statements_per_message"])
                         + " | exec µs/msg " + _kv(c["statement_us_per_message"])
                         + " | WAL B/msg " + _kv(c["statement_wal_bytes_per_message"]))
            if c.get("broker_layers_us"):
                lines.append("      broker µs/msg by layer " + _kv(c["broker_layers_us"]))
    s = result["summary"]
    lines.append("\nmedians (range) over rounds, µs of CPU per message:")
    for v, f in s["variants"].items():
        lines.append(f"  {v:14} server {_mr(f['server'])} = broker {_mr(f['broker'])} + "
                     f"PostgreSQL {_mr(f['postgres'])}; x Queen: server "
                     f"{f['queen_ratio']['server']}, broker {f['queen_ratio']['broker']}, "
                     f"PostgreSQL {f['queen_ratio']['postgres']}")
        for phase in ("push", "consume"):
            if phase in f:
                lines.append(f"  {'':14} {phase}: server {_mr(f[phase]['server'])} = broker "
                             f"{_mr(f[phase]['broker'])} + PostgreSQL "
                             f"{_mr(f[phase]['postgres'])}")
    for name, f in s["ratios"].items():
        lines.append(f"  ratio {name}: server {_mr(f['server'])}, broker {_mr(f['broker'])}, "
                     f"PostgreSQL {_mr(f['postgres'])}")
    return "\n".join(lines) + "\n"


def _kv(d: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items())


def _mr(f: dict[str, float]) -> str:
    return f"{f['median']} ({f['min']}..{f['max']})"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cost", help="server CPU per message on Queen's soak shape",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--messages", type=int, default=40_000, help="messages per cell")
    p.add_argument("--batch", type=int, default=100, help="messages per push")
    p.add_argument("--pop-batch", type=int, default=500)
    p.add_argument("--partitions", type=int, default=200)
    p.add_argument("--pop-partitions", type=int, default=4, help="`partitions` of each pop")
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--connections", type=int, default=8, help="producer connections")
    p.add_argument("--consumer", nargs="+", choices=CONSUMERS, default=list(CONSUMERS))
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--compare-workers", type=int,
                   help="the other side's web workers (with no --compare-root: this checkout "
                        "with that many web workers, measured in the same run)")
    p.add_argument("--max-seconds", type=float, default=300.0,
                   help="the producers stop here if they have not sent every message")
    p.add_argument("--compare-root", type=Path,
                   help="another checkout, measured in the same run (alternating)")
    p.add_argument("--phased", action="store_true",
                   help="push every message first, then drain: full pops, and the CPU of "
                        "pushing and of consuming (pop and ack) reported apart")
    p.add_argument("--no-profile", action="store_true", help="no py-spy (no layers)")
    p.add_argument("--out", type=Path, default=RESULTS)


def command(args: argparse.Namespace) -> int:
    run_id = "cost-" + time.strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    sides = sides_of(args)
    result: dict[str, Any] = {
        "run_id": run_id, "argv": sys.argv, "load_start": [round(x, 2) for x in os.getloadavg()],
        "queen_us": QUEEN_US, "rounds": [],
        "shape": (f"pushes of {args.batch} over {args.partitions} partitions from "
                  f"{args.connections} connections, {args.consumers} consumers popping "
                  f"{args.pop_batch} (partitions={args.pop_partitions}) with manual acks, "
                  f"{args.messages} messages a cell, "
                  + "; ".join(f"{s.name}: {s.workers} web worker{'' if s.workers == 1 else 's'}"
                              for s in sides)),
        "this_root": str(launch.ROOT),
        "other_root": str(args.compare_root.resolve()) if args.compare_root else None,
        "workers": {s.name: s.workers for s in sides}}
    with launch.Postgres() as pg:
        for i in range(args.rounds):
            cells: dict[str, dict[str, Any]] = {}
            order = sides if i % 2 == 0 else list(reversed(sides))
            for side in order:
                for consumer in args.consumer:
                    name = f"{side.name} {consumer}"
                    profile_to = None if args.no_profile else (
                        args.out / f"{run_id}-{i + 1}-{side.name}-{consumer}.profile.txt")
                    cells[name] = _cell(args, pg, side, consumer, f"cost {name} #{i + 1}",
                                        profile_to)
            result["rounds"].append(cells)
    result["load_end"] = [round(x, 2) for x in os.getloadavg()]
    result["summary"] = summarize(result["rounds"])
    text = render(result)
    (args.out / f"{run_id}.json").write_text(json.dumps(result, indent=1, default=str))
    (args.out / f"{run_id}.txt").write_text(text)
    print(text)
    failed = [n for r in result["rounds"] for n, c in r.items() if c.get("verdict") != "ok"]
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.cost")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    return command(parser.parse_args(["cost", *(argv or sys.argv[1:])]))


if __name__ == "__main__":
    sys.exit(main())

