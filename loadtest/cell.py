"""Measure one cell against a broker URL and turn the outcome into the reported figures.

Figures per cell: msg/s (push, delivery), p50/p99 of push/pop/ack/end-to-end, broker RSS,
CPU of broker / PostgreSQL / generator, messages per server-core-second, commits and WAL
bytes per message, segment rows per push request. A cell that fails the gate keeps its
diagnostics but loses every throughput figure.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest import claims, pgstats, profile
from loadtest.drain import fetch_all
from loadtest.gate import check
from loadtest.runner import CellOutcome, Shape, run_cell


@dataclass(frozen=True, slots=True)
class Target:
    """Where the cell runs: a broker URL, and optionally its database (for counters)."""

    url: str
    database_url: str | None
    roots: dict[str, int | None]


def steady(series: list[dict[str, float]], key: str, warmup: float = 2.0) -> float:
    """Median of the per-second rate after the warm-up, over seconds that carried load."""
    values = [p[key] for p in series if p["t"] > warmup and p[key] > 0]
    values = values[:-1] if len(values) > 2 else values  # the last second is partial
    return statistics.median(values) if values else 0.0


def measure(target: Target, shape: Shape, label: str, *, gate: bool = True,
            profile_to: Path | None = None) -> dict[str, Any]:
    """Run the cell and summarize it; with `profile_to`, also sample the broker with py-spy
    and read pg_stat_statements, writing the profile there (loadtest/profile.py)."""
    spy = None
    if profile_to is not None and target.database_url:
        asyncio.run(profile.reset_statements(target.database_url))
        spy = profile.PySpy(target.roots.get("broker"), profile_to.with_suffix(".stacks"))
    # Claim statements and those that found nothing (loadtest/claims.py says where it reads),
    # read outside the commit and WAL counters' window.
    claims_before = (asyncio.run(claims.snapshot(target.database_url, target.url))
                     if shape.groups else None)
    before = asyncio.run(pgstats.snapshot(target.database_url)) if target.database_url else None
    out = run_cell(target.url, shape, target.roots, label)
    after = asyncio.run(pgstats.snapshot(target.database_url)) if target.database_url else None
    claimed = (claims.between(claims_before, asyncio.run(claims.snapshot(
        target.database_url, target.url, flush_wait_s=1.2))) if shape.groups else None)
    profiled = None
    if profile_to is not None:
        stacks = spy.stop() if spy else None
        statements = nested = []
        pops = None
        if target.database_url:
            statements = asyncio.run(profile.top_statements(target.database_url))
            nested = asyncio.run(profile.top_statements(target.database_url, toplevel=False))
            pops = asyncio.run(profile.pop_runs(target.database_url))
        profile_to.write_text(profile.render(label, stacks, statements, nested, pops))
        profiled = {"stacks": stacks, "statements": statements, "nested": nested,
                    "pops": pops, "file": str(profile_to)}
    if gate and not shape.groups:  # push-only: read everything back by offset
        stored = asyncio.run(fetch_all(target.url, shape.queue, shape.partitions))
        out.gates.append(check("fetch", out.pushed, stored, out.uncertain))
    result = summarize(out, shape, label, before, after,
                       asyncio.run(_wal(target, before, after)), gate)
    if profiled is not None:
        result["profile"] = profiled
    if shape.groups:
        result["claims"] = claimed
    return result


async def _wal(target: Target, before: pgstats.PgSnapshot | None,
               after: pgstats.PgSnapshot | None) -> int | None:
    if not (target.database_url and before and after):
        return None
    return await pgstats.wal_bytes(target.database_url, before.wal_lsn, after.wal_lsn)


def summarize(out: CellOutcome, shape: Shape, label: str, before: pgstats.PgSnapshot | None,
              after: pgstats.PgSnapshot | None, wal: int | None, gate: bool) -> dict[str, Any]:
    pushed = out.pushed.count()
    delivered = sum(g.delivered for g in out.gates if g.group != "fetch")
    passed = (all(g.passed for g in out.gates) and not out.lost_processes) if gate else True
    reqs = pushed / shape.batch if shape.batch else 0
    server_cpu = sum(v for k, v in out.cpu.items() if k != "generator")
    moved = pushed + delivered
    result: dict[str, Any] = {
        "cell": label,
        "shape": {k: getattr(shape, k) for k in shape.__dataclass_fields__},
        "gate": {"passed": passed, "checked": gate, "lost_processes": out.lost_processes,
                 "groups": [_gate(g) for g in out.gates]},
        "uncertain_pushes": out.uncertain,
        "latency_ms": {k: h.summary() for k, h in out.hists.items() if h.total},
        "cpu_seconds": out.cpu,
        **({"phase_cpu_seconds": out.phase_cpu} if out.phase_cpu else {}),
        # Server CPU per delivered message, per process role (broker, postgres, ...): the
        # figure compared with a peer's in the same run.
        "cpu_us_per_delivered": ({k: round(v / delivered * 1e6, 1) for k, v in out.cpu.items()
                                  if k != "generator"} if delivered else {}),
        "peak_rss_bytes": out.rss,
        "peak_worker_rss_mib": round(out.worker_rss / 2**20, 1) if out.worker_rss else None,
        "seconds": round(out.measured_seconds, 2),
        # The generator shares the cores: when it burns more CPU than the server side, the
        # figure says more about the client library than about the system under test.
        "generator_bound": out.cpu.get("generator", 0.0) > server_cpu,
        "series": out.series,
        "steps": out.step_log,
    }
    if before and after:
        commits = after.xact_commit - before.xact_commit
        segs = after.segments - before.segments
        result["db"] = {"commits": commits, "wal_bytes": wal, "segments": segs,
                        "commits_per_message": round(commits / moved, 4) if moved else None,
                        "wal_bytes_per_message": round(wal / pushed, 1) if wal and pushed else None,
                        "segments_per_request": round(segs / reqs, 3) if reqs else None}
    if not passed:
        result["verdict"] = "FAILURE"
        return result  # no throughput for a run that lost or duplicated messages
    result["verdict"] = "ok"
    window = out.measured_seconds or 1.0
    result["throughput"] = {
        "push_msg_per_s": round(pushed / window, 1),
        "push_req_per_s": round(reqs / window, 1),
        "steady_push_msg_per_s": steady(out.series, "push_rate"),
        "steady_deliver_msg_per_s": steady(out.series, "deliver_rate"),
        "messages_per_server_core_second": round(moved / server_cpu, 1) if server_cpu else None,
    }
    if out.step_log:
        steps = result["throughput"]["steps"] = _steps(out)
        # The best rate a step sustained (its verdicts in _steps); 0 when none did.
        result["throughput"]["best_ok_deliver_msg_per_s"] = max(
            (s["deliver_msg_per_s"] for s in steps if s["ok"]), default=0.0)
    return result


def _gate(g: Any) -> dict[str, Any]:
    return {k: getattr(g, k) for k in g.__slots__} | {"passed": g.passed}


def _steps(out: CellOutcome) -> list[dict[str, Any]]:
    rows = []
    for s in out.step_log:
        st = int(s["step"])
        hist = out.e2e_by_step.get(st)
        pts = [p["deliver_rate"] for p in out.series
               if p.get("rate") == s["offered"] and p["deliver_rate"] > 0]
        rows.append({**s, "e2e_p99_ms": hist.percentile(99) if hist else None,
                     "deliver_msg_per_s": statistics.median(pts) if pts else 0.0,
                     "warmup": st == 0,
                     "ok": bool(st > 0 and s["lag_growth"] <= s["offered"]
                                and s.get("achieved", 0) >= 0.9 * s["offered"]
                                and hist is not None and (hist.percentile(99) or 0) <= 1000)})
    return rows
