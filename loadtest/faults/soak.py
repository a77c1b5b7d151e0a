"""`python -m loadtest soak`: constant moderate load for minutes with retention on.

One `serve` (embedded, durable PostgreSQL), a queue with `retentionSeconds` (segments older
than that are deleted by the reaper every RETENTION_INTERVAL), producers and consumers in
their own processes (push, pop, ack everything). Every `--sample` seconds it records the RSS
and open files of every broker process (serve, web workers, reaper; PostgreSQL server
processes summed), the database's connections (pg_stat_activity), and the size of the
segment table and of the transactionId index (pg_total_relation_size). From the journals
it computes p99 latency and 5xx per minute (a pop's latency includes the time it was parked
waiting for a push; empty long polls are left out).

The verdict compares the second half of the run with the first sample after warm-up: a
figure is flat when it grows by less than its tolerance. Storage must plateau: once every
message is older than the retention, the segment table may not keep growing. The
transactionId index is kept for max(dedupWindowSeconds, 1 h) by design (docs/operating/retention.md), so
it grows for the first hour; it is reported, not judged.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil  # type: ignore[import-untyped]

from broker.ports import free_port
from loadtest.faults.base import RESULTS
from loadtest.faults.consumer import Consumer
from loadtest.faults.journal import read_all
from loadtest.faults.report import publish
from loadtest.faults.servers import ROOT, ServeInstance, die_with_parent

QUEUE = "soak"
WARMUP_S = 60.0
# Tolerances for "flat": relative growth, with an absolute floor below which noise rules.
TOLERANCE = {"rss_mb": (0.15, 15.0), "open_files": (0.10, 4), "db_connections": (0.10, 3),
             "p99_ms": (1.0, 50.0)}


class SoakConsumer(Consumer):
    """Acks every batch whole: the soak measures steady work, not the fault paths."""

    async def handle(self, messages: list[dict[str, Any]], lease: str) -> None:
        await self.ack(messages, move="all", lease=lease, pop_lease=lease)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("soak", help="minutes of moderate load with retention on")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=20.0,
                   help="pushes/s per producer (paced: low enough to hold on a busy machine)")
    p.add_argument("--items", type=int, default=5, help="most messages per push")
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--consumers", type=int, default=2)
    p.add_argument("--retention-seconds", type=int, default=60)
    p.add_argument("--retention-interval-ms", type=int, default=5000)
    p.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=RESULTS)


def _proc_figures(pids: list[int]) -> tuple[int, int]:
    rss = files = 0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            rss += proc.memory_info().rss
            files += proc.num_fds()
        except psutil.Error:
            continue
    return rss, files


async def _sample(inst: ServeInstance, conn: asyncpg.Connection, started: float) -> dict[str, Any]:
    roles = await asyncio.to_thread(inst.roles)
    out: dict[str, Any] = {"t": round(time.time() - started, 1)}
    for name, pids in (("serve", [roles.serve] if roles.serve else []), ("web", list(roles.web)),
                       ("reaper", list(roles.reaper))):
        rss, files = _proc_figures(pids)
        out[f"{name}_rss_mb"] = round(rss / 2**20, 1)
        out[f"{name}_open_files"] = files
        out[f"{name}_pids"] = pids
    pg_pids: list[int] = []
    if roles.postmaster:
        with contextlib.suppress(psutil.Error):
            master = psutil.Process(roles.postmaster)
            pg_pids = [master.pid, *(c.pid for c in master.children())]
    pss = 0  # proportional: shared buffers counted once across the server's processes
    for pid in pg_pids:
        with contextlib.suppress(psutil.Error):
            pss += psutil.Process(pid).memory_full_info().pss
    out["postgres_pss_mb"] = round(pss / 2**20, 1)
    out["postgres_processes"] = len(pg_pids)
    row = await conn.fetchrow(
        "SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database())"
        " AS connections,"
        " pg_total_relation_size('queen.log_segments') AS segments_bytes,"
        " pg_total_relation_size('queen.log_txn_index') AS index_bytes,"
        " (SELECT count(*) FROM queen.log_segments) AS segment_rows,"
        " extract(epoch FROM now() - (SELECT min(created_at) FROM queen.log_segments))"
        "   AS oldest_s")
    assert row is not None
    out["db_connections"] = row["connections"]
    out["segments_mb"] = round(row["segments_bytes"] / 2**20, 2)
    out["txn_index_mb"] = round(row["index_bytes"] / 2**20, 2)
    out["segment_rows"] = row["segment_rows"]
    out["oldest_segment_s"] = round(float(row["oldest_s"] or 0), 1)
    return out


def _per_minute(records: list[dict[str, Any]], started: float) -> list[dict[str, Any]]:
    by_minute: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    fives: dict[int, int] = defaultdict(int)
    for r in records:
        if r["k"] not in ("push", "pop", "ack") or "t0" not in r:
            continue
        minute = int((r["t0"] - started) // 60)
        if r.get("st") is not None and r["st"] >= 500:
            fives[minute] += 1
        if r["k"] == "pop" and r.get("st") == 204:
            continue  # an empty long poll measures its timeout, not the broker
        by_minute[minute][r["k"]].append(r["t1"] - r["t0"])
    out = []
    for minute in sorted(by_minute):
        row: dict[str, Any] = {"minute": minute + 1, "5xx": fives.get(minute, 0)}
        for kind, lats in sorted(by_minute[minute].items()):
            lats.sort()
            row[f"{kind}_n"] = len(lats)
            row[f"{kind}_p99_ms"] = round(lats[min(len(lats) - 1, int(len(lats) * 0.99))]
                                          * 1000, 1)
        out.append(row)
    return out


def _trend(name: str, values: list[float], tolerance: tuple[float, float]) -> dict[str, Any]:
    """Flat when the second half's median exceeds the first post-warm-up value by less than
    the tolerance (relative, or the absolute floor, whichever is larger)."""
    if len(values) < 4:
        return {"figure": name, "verdict": "too few samples", "values": values}
    base = values[0]
    late = statistics.median(values[len(values) // 2:])
    allowed = max(abs(base) * tolerance[0], tolerance[1])
    return {"figure": name, "first": base, "second_half_median": late, "max": max(values),
            "growth": round(late - base, 2), "allowed": round(allowed, 2),
            "verdict": "flat" if late - base <= allowed else "GROWING"}


def verdicts(samples: list[dict[str, Any]], minutes: list[dict[str, Any]],
             retention_s: int, retention_interval_s: float) -> list[dict[str, Any]]:
    settled = [s for s in samples if s["t"] >= WARMUP_S] or samples
    out = []
    for key in ("web_rss_mb", "reaper_rss_mb", "serve_rss_mb"):
        out.append(_trend(key, [s[key] for s in settled], TOLERANCE["rss_mb"]))
    for key in ("web_open_files", "reaper_open_files", "serve_open_files"):
        out.append(_trend(key, [s[key] for s in settled], TOLERANCE["open_files"]))
    out.append(_trend("db_connections", [s["db_connections"] for s in settled],
                      TOLERANCE["db_connections"]))
    # The first minute is warm-up; a last minute the run only started is too thin to judge.
    full = [m for m in minutes[1:] if m.get("push_n", 0) >= 0.5 * statistics.median(
        x.get("push_n", 0) for x in minutes)]
    for kind in ("push", "pop", "ack"):
        values = [m[f"{kind}_p99_ms"] for m in full if f"{kind}_p99_ms" in m]
        out.append(_trend(f"{kind}_p99_ms", values, TOLERANCE["p99_ms"]))
    # Storage: after two retention periods every stored message is young, so the table
    # holds at most ~retention × rate; from then on it must not keep growing, and the oldest
    # segment must stay younger than the retention plus a reaper cadence (retention keeps up
    # whatever the rate does).
    plateau = [s for s in samples if s["t"] >= WARMUP_S + 2 * retention_s]
    out.append(_trend("segments_mb", [s["segments_mb"] for s in plateau], (0.25, 2.0)))
    oldest = max((s["oldest_segment_s"] for s in plateau), default=None)
    bound = retention_s + retention_interval_s + 10
    out.append({"figure": "oldest_segment_s", "max": oldest, "bound": bound,
                "verdict": "ok" if oldest is not None and oldest <= bound else "TOO OLD"})
    total_5xx = sum(m["5xx"] for m in minutes)
    out.append({"figure": "5xx", "value": total_5xx, "verdict": "ok" if total_5xx == 0
                else "NOT ZERO"})
    return out


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    run_id = time.strftime("%Y%m%d-%H%M%S")
    run_dir = args.out / f"soak-{run_id}"
    run_dir.mkdir(parents=True, exist_ok=True)
    data_root = Path(tempfile.mkdtemp(prefix="qs-"))
    env = {"RETENTION_INTERVAL": str(args.retention_interval_ms), "REAPER_INTERVAL_MS": "500"}
    inst = ServeInstance("b0", free_port(), data_root / "b0", workers=args.workers,
                         database_url=None, env=env, log_dir=run_dir)
    procs: list[subprocess.Popen[bytes]] = []
    stop = run_dir / "stop"
    samples: list[dict[str, Any]] = []
    result: dict[str, Any] = {"run_id": run_id, "argv": sys.argv, "config": {
        k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    print(f"soak {run_id}: {args.minutes} min, journals in {run_dir}", file=sys.stderr)
    try:
        inst.start()
        if not await inst.wait_healthy(90):
            raise RuntimeError(f"serve did not start; see {inst.log_path}")
        async with httpx.AsyncClient(base_url=inst.url, timeout=30) as client:
            r = await client.post("/api/v1/configure", json={"queue": QUEUE, "options": {
                "retentionSeconds": args.retention_seconds, "retentionEnabled": True,
                "leaseTime": 30}})
            r.raise_for_status()
        spawn = functools.partial(_spawn, run_dir)
        for i in range(args.producers):
            procs.append(spawn("loadtest.faults.producer", {
                "name": f"p{i}", "urls": [inst.url], "queue": QUEUE,
                "partitions": [f"P{k}" for k in range(8)], "run_dir": str(run_dir),
                "seed": 100 + i, "rate": args.rate, "max_items": args.items, "dup_prob": 0.0,
                "stop_file": str(stop)}))
        for i in range(args.consumers):
            procs.append(spawn("loadtest.faults.soak", {
                "name": f"c{i}", "group": "soak", "urls": [inst.url], "queue": QUEUE,
                "lease_seconds": 30, "run_dir": str(run_dir), "seed": 200 + i,
                "stop_file": str(stop), "drain_file": str(run_dir / "none"),
                "max_batch": 50, "max_partitions": 4}))
        started = time.time()
        conn = await asyncpg.connect(inst.embedded_dsn)
        try:
            while time.time() - started < args.minutes * 60:
                samples.append(await _sample(inst, conn, started))
                last = samples[-1]
                print(f"  t={last['t']:>6}s web {last['web_rss_mb']} MB, "
                      f"files {last['web_open_files']}, conns {last['db_connections']}, "
                      f"segments {last['segments_mb']} MB ({last['segment_rows']} rows, "
                      f"oldest {last['oldest_segment_s']} s)", file=sys.stderr)
                await asyncio.sleep(args.sample)
        finally:
            await conn.close()
        stop.touch()
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.wait, 30)
        result["serve_exited_during_run"] = inst.exited()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        await asyncio.to_thread(inst.stop)
        shutil.rmtree(data_root, ignore_errors=True)
    minutes = _per_minute(list(read_all(run_dir)), started)
    result.update(samples=samples, minutes=minutes,
                  verdicts=verdicts(samples, minutes, args.retention_seconds,
                                    args.retention_interval_ms / 1000))
    result["passed"] = all(v["verdict"] in ("flat", "ok") for v in result["verdicts"]) \
        and not result["serve_exited_during_run"]
    path = args.out / f"soak-{run_id}.json"
    path.write_text(json.dumps(result, indent=1))
    result["json_path"] = str(path)
    return result


def _spawn(run_dir: Path, module: str, config: dict[str, Any]) -> subprocess.Popen[bytes]:
    with open(run_dir / "workload.log", "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module, json.dumps(config)], cwd=ROOT, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=functools.partial(die_with_parent, signal.SIGKILL))  # noqa: PLW1509


def table(result: dict[str, Any]) -> str:
    lines = [f"soak {result['run_id']}: {'PASSED' if result['passed'] else 'FAILED'}",
             "command: " + " ".join(result["argv"]), "", "per minute:"]
    for m in result["minutes"]:
        lines.append("  " + ", ".join(f"{k}={v}" for k, v in m.items()))
    lines += ["", "verdicts:"]
    for v in result["verdicts"]:
        lines.append("  " + ", ".join(f"{k}={v[k]}" for k in v if k != "values"))
    s = result["samples"]
    if s:
        lines += ["", "first and last sample:", "  " + json.dumps(s[0]), "  " + json.dumps(s[-1])]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    result = asyncio.run(soak(args))
    publish(table(result), result["json_path"])
    return 0 if result["passed"] else 1


if __name__ == "__main__":  # a soak consumer process
    sys.exit(SoakConsumer.main())
