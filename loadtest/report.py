"""Results: one JSON file, one PNG plot and a short text summary per run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loadtest.claims import describe

RESULTS = Path(__file__).resolve().parent / "results"


def write(run: dict[str, Any], run_id: str, out_dir: Path = RESULTS) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / f"{run_id}.json", "png": out_dir / f"{run_id}.png",
             "txt": out_dir / f"{run_id}.txt", "md": out_dir / f"{run_id}.md"}
    paths["json"].write_text(json.dumps(run, indent=1, default=str))
    paths["txt"].write_text(summary(run))
    paths["md"].write_text(table(run))
    try:
        plot(run, paths["png"])
    except ImportError:  # matplotlib is in the loadtest extra only
        paths.pop("png")
    return paths


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}{unit}"
    return f"{v}{unit}"


def summary(run: dict[str, Any]) -> str:
    lines = [f"run {run['run_id']}  target {run['target']}  workers {run.get('workers')}",
             (f"corpus: {run['corpus']['messages']} messages, mean "
              f"{run['corpus']['mean_bytes']:.0f} B, zstd-1 ratio {run['corpus']['zstd_ratio']:.2f}")]
    for key, fig in run.get("ceilings", {}).items():
        lines.append(f"ceiling {key}: {_fmt(fig.get('msg_per_s'))} msg/s"
                     + (f", {_fmt(fig.get('req_per_s') or fig.get('pop_req_per_s'))} req/s"
                        if fig.get('req_per_s') or fig.get('pop_req_per_s') else ""))
    for cell in run["cells"]:
        gate = cell["gate"]
        g = "; ".join(f"{x['group']}: pushed {x['pushed']} delivered {x['delivered']} missing "
                      f"{x['missing']} dup {x['duplicated']} unexpected {x['unexpected']}"
                      for x in gate["groups"]) or "not checked"
        lines.append(f"\n[{cell['cell']}] {cell['verdict']}  gate: {g}")
        if cell["verdict"] != "ok":
            lines.append("  FAILURE: no throughput reported for this cell")
            continue
        t = cell["throughput"]
        lines.append(f"  push {_fmt(t['push_msg_per_s'])} msg/s ({_fmt(t['push_req_per_s'])} req/s),"
                     f" steady push {_fmt(t['steady_push_msg_per_s'])} msg/s,"
                     f" steady delivery {_fmt(t['steady_deliver_msg_per_s'])} msg/s,"
                     f" {_fmt(t['messages_per_server_core_second'])} msg per server core-second")
        lat = cell["latency_ms"]
        lines.append("  latency p50/p99 ms: " + ", ".join(
            f"{k} {_fmt(v['p50_ms'])}/{_fmt(v['p99_ms'])}" for k, v in lat.items()))
        if cell.get("generator_bound"):
            lines.append("  NOTE: generator-bound (the load generator used more CPU than the "
                         "server side): the figure is a lower bound")
        lines.append(f"  cpu s: {cell['cpu_seconds']}  peak RSS MiB: "
                     + str({k: round(v / 2**20) for k, v in cell['peak_rss_bytes'].items()})
                     + f", largest web worker {_fmt(cell.get('peak_worker_rss_mib'))}")
        if cell.get("cpu_us_per_delivered"):
            lines.append(f"  cpu us per delivered message: {cell['cpu_us_per_delivered']}")
        if "claims" in cell:
            lines.append("  " + describe(cell["claims"]))
        if "db" in cell:
            d = cell["db"]
            lines.append(f"  commits/msg {d['commits_per_message']}, WAL B/msg "
                         f"{d['wal_bytes_per_message']}, segment rows/request {d['segments_per_request']}")
        if t.get("steps"):
            best = t.get("best_ok_deliver_msg_per_s")
            lines.append(f"  best sustained delivery: {_fmt(best)} msg/s" if best else
                         "  best sustained delivery: none (no step after the warm-up held)")
        for s in t.get("steps", []):
            lines.append(f"  step offered {s['offered']:.0f}: delivered {s['deliver_msg_per_s']:.0f}"
                         f" msg/s, e2e p99 {_fmt(s['e2e_p99_ms'])} ms, lag growth "
                         f"{s['lag_growth']:.0f}, pushed {s.get('achieved', 0):.0f} msg/s "
                         f"{'warm-up' if s.get('warmup') else 'ok' if s['ok'] else 'SATURATED'}")
        for name, r in cell.get("ratios", {}).items():
            lines.append(f"  ratio {name}: {r:.2f}")
        if cell.get("repeats"):
            rp = cell["repeats"]
            lines.append(f"  repeats ({rp['figure']}): median {rp['median']:.0f}, range "
                         f"{rp['range'][0]:.0f}..{rp['range'][1]:.0f}")
    for name, v in run.get("cross", {}).items():
        lines.append(f"cross-cell {name}: {v}")
    for skipped in run.get("skipped", []):
        lines.append(f"\n[{skipped['cell']}] skipped: {skipped['reason']}")
    for peer in run.get("peers", []):
        lines.append(f"\npeer {peer['peer']}: {peer.get('verdict')} {_fmt(peer.get('msg_per_s'))} msg/s"
                     f" e2e p99 {_fmt(peer.get('e2e_p99_ms'))} ms, cpu s {peer.get('cpu_seconds')}"
                     f", cpu us per delivered message {peer.get('cpu_us_per_delivered')}"
                     f"{', GENERATOR-BOUND (lower bound)' if peer.get('generator_bound') else ''}"
                     f"; {peer.get('note', '')}")
    return "\n".join(lines) + "\n"


def table(run: dict[str, Any]) -> str:
    """One Markdown row per cell and per peer, ratios included, for the docs."""
    rows = [("| cell | gate (missing / dup) | push msg/s | delivered msg/s (stepped: best "
             "sustained) | p99 ms push / pop / ack / e2e | commits/msg | WAL B/msg | "
             "peak RSS per worker MiB | ratios |"),
            "|---|---|---|---|---|---|---|---|---|"]
    for cell in run["cells"]:
        groups = cell["gate"]["groups"]
        gate = (f"{cell['verdict']} ({sum(g['missing'] for g in groups)} / "
                f"{sum(g['duplicated'] for g in groups)})")
        if cell["verdict"] != "ok":
            rows.append(f"| {cell['cell']} | {gate} | - | - | - | - | - | - | FAILED: no figures |")
            continue
        t, lat, d = cell["throughput"], cell["latency_ms"], cell.get("db", {})
        p99 = " / ".join(_fmt(lat.get(k, {}).get("p99_ms")) for k in ("push", "pop", "ack", "e2e"))
        ratios = "; ".join(f"{name} {r:.2f}" for name, r in cell.get("ratios", {}).items())
        share = (cell.get("claims") or {}).get("found_nothing_share")
        if share is not None:
            ratios += f"{'; ' if ratios else ''}claims that found nothing {share:.1%}"
        delivered = t.get("steady_deliver_msg_per_s") or None
        ok_steps = [s for s in t.get("steps", []) if s.get("ok")]
        if ok_steps:  # a stepped cell: the best rate it sustained, not the run's average
            delivered = max(s["deliver_msg_per_s"] for s in ok_steps)
        rows.append(f"| {cell['cell']} | {gate} | {_fmt(t['steady_push_msg_per_s'])} | "
                    f"{_fmt(delivered)} | {p99} | {d.get('commits_per_message', '-')} | "
                    f"{_fmt(d.get('wal_bytes_per_message'))} | "
                    f"{_fmt(cell.get('peak_worker_rss_mib'))} | {ratios} |")
    for peer in run.get("peers", []):
        rows.append(f"| W2 peer {peer['peer']} | {peer.get('verdict')} | - | "
                    f"{_fmt(peer.get('msg_per_s'))} | - / - / - / {_fmt(peer.get('e2e_p99_ms'))}"
                    f" | - | - | - | {peer.get('note', '')} |")
    for name, v in run.get("cross", {}).items():
        rows.append(f"| {name} | | | | | | | | {v} |")
    for skipped in run.get("skipped", []):
        rows.append(f"| {skipped['cell']} | skipped | - | - | - | - | - | - | "
                    f"{skipped['reason']} |")
    return "\n".join(rows) + "\n"


def plot(run: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2, a3) = plt.subplots(3, 1, figsize=(11, 12))
    for cell in run["cells"]:
        s = cell["series"]
        ts = [p["t"] for p in s]
        a1.plot(ts, [p["push_rate"] for p in s], label=f"{cell['cell']} push")
        if any(p["deliver_rate"] for p in s):
            a1.plot(ts, [p["deliver_rate"] for p in s], "--", label=f"{cell['cell']} delivered")
        a2.plot(ts, [p["push_p99"] for p in s], label=f"{cell['cell']} push p99")
        if any(p["e2e_p99"] for p in s):
            a2.plot(ts, [p["e2e_p99"] for p in s], "--", label=f"{cell['cell']} e2e p99")
    a1.set_title("throughput over time (msg/s)")
    a1.set_xlabel("s")
    a1.legend(fontsize=7)
    a2.set_title("p99 latency over time (ms, 1 s windows)")
    a2.set_xlabel("s")
    a2.set_yscale("log")
    a2.legend(fontsize=7)
    names = [c["cell"] for c in run["cells"]]
    peers = sorted({p for c in run["cells"] for p in c.get("peer_msg_per_s", {})})
    bars: dict[str, list[float]] = {"broker": [], "L-SQL ceiling": []}
    bars.update({p: [] for p in peers})
    for cell in run["cells"]:
        t = cell.get("throughput") or {}
        bars["broker"].append(t.get("best_ok_deliver_msg_per_s")
                              or t.get("steady_deliver_msg_per_s")
                              or t.get("steady_push_msg_per_s") or 0)
        bars["L-SQL ceiling"].append(cell.get("ceiling_msg_per_s") or 0)
        for p in peers:
            bars[p].append((cell.get("peer_msg_per_s") or {}).get(p) or 0)
    width = 0.8 / len(bars)
    for k, (label, values) in enumerate(bars.items()):
        a3.bar([i - 0.4 + width * (k + 0.5) for i in range(len(names))], values, width,
               label=label)
    a3.set_xticks(list(range(len(names))), names, fontsize=8, rotation=15)
    a3.set_yscale("log")
    a3.set_ylim(bottom=100)
    a3.set_title("per cell: broker vs L-SQL ceiling vs peers (msg/s, log); failed cells show 0")
    a3.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
