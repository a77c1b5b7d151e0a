"""Where the time goes in a cell: py-spy on the broker's processes, pg_stat_statements in
PostgreSQL (`python -m loadtest run ... --profile`).

py-spy samples the broker's process tree (supervisor and web workers) for the measured
window and writes collapsed stacks; the summary is the functions with the most samples, by
their own time and including what they call. pg_stat_statements is reset before the cell
and read after it: the statements by total execution time.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg

from loadtest import claims

_RATE = 67  # samples per second: enough for a 20 s cell, little enough to stay out of the way


class PySpy:
    """`py-spy record` of one process tree, as raw collapsed stacks."""

    def __init__(self, pid: int | None, out: Path) -> None:
        self.out = out
        self.proc: subprocess.Popen[bytes] | None = None
        # Installed with the loadtest extra beside this interpreter, which need not be on
        # PATH (a virtualenv's python run by its path).
        beside = Path(sys.executable).parent / "py-spy"
        binary = str(beside) if beside.exists() else shutil.which("py-spy")
        if pid and binary:
            self.proc = subprocess.Popen(
                [binary, "record", "--pid", str(pid), "--subprocesses", "--nonblocking",
                 "--rate", str(_RATE), "--format", "raw", "--output", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> dict[str, Any] | None:
        """Stop sampling (py-spy writes its file on SIGINT); answer the summary."""
        if self.proc is None:
            return None
        import signal

        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return summarize_stacks(self.out) if self.out.exists() else None


def summarize_stacks(path: Path, top: int = 25) -> dict[str, Any]:
    """Top functions by own samples and by inclusive samples, with shares of all samples.

    Idle samples (the event loop waiting in select/epoll) are counted apart: they are time
    the process had nothing to do."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    layers: collections.Counter[str] = collections.Counter()
    total = idle = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f]
        # py-spy's first frame names the process ("process 123:\"python -m ...\"").
        frames = [f for f in frames if not f.startswith("process ")]
        if not frames:
            continue
        total += count
        leaf = _short(frames[-1])
        if _is_idle(leaf):
            idle += count
            continue
        own[leaf] += count
        for name in {_short(f) for f in frames}:
            inclusive[name] += count
        layers[_layer(frames)] += count
    busy = max(total - idle, 1)
    return {"samples": total, "idle_share": round(idle / max(total, 1), 3),
            "own": [(n, round(c / busy, 4)) for n, c in own.most_common(top)],
            "inclusive": [(n, round(c / busy, 4)) for n, c in inclusive.most_common(top)],
            "layers": [(n, round(c / busy, 4)) for n, c in layers.most_common()]}


# Where a busy sample's time goes, by the library or package of its innermost frame that
# belongs to one (checked from the leaf up): the HTTP stack, the PostgreSQL driver, our code.
_LAYERS = (("asyncpg/", "asyncpg (driver)"), ("hypercorn/", "hypercorn + h11 (HTTP/1.1)"),
           ("h11/", "hypercorn + h11 (HTTP/1.1)"), ("asyncio/streams", "hypercorn + h11 (HTTP/1.1)"),
           ("starlette/", "starlette"), ("msgspec", "msgspec"), ("zstandard", "zstd"),
           ("(broker/", "broker/"), ("(core/", "core/"))


def _layer(frames: list[str]) -> str:
    for frame in reversed(frames):
        for marker, layer in _LAYERS:
            if marker in frame:
                return layer
    return "event loop and other"


def _short(frame: str) -> str:
    # "function (path/to/module.py:123)" -> "function (module.py)"
    name, _, where = frame.partition(" (")
    module = where.rsplit("/", 1)[-1].split(":", 1)[0]
    return f"{name} ({module})" if module else name


def _is_idle(leaf: str) -> bool:
    return leaf.startswith(("select (", "poll (", "epoll", "run_forever", "_run_once (")) \
        or "(selectors.py)" in leaf


async def reset_statements(url: str) -> bool:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await conn.execute("SELECT pg_stat_statements_reset()")
        return True
    except asyncpg.PostgresError:  # not preloaded on an operator's server
        return False
    finally:
        await conn.close()


async def top_statements(url: str, top: int = 12, *,
                         toplevel: bool = True) -> list[dict[str, Any]]:
    """The statements by total execution time: those the broker sent (`toplevel`), or
    those run inside its PL/pgSQL functions (their time is already inside the caller's)."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            """SELECT calls, total_exec_time, mean_exec_time, rows,
                      regexp_replace(query, '\\s+', ' ', 'g') AS query
                 FROM pg_stat_statements
                WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND toplevel = $2
                ORDER BY total_exec_time DESC LIMIT $1""", top, toplevel)
    except asyncpg.PostgresError:
        return []
    finally:
        await conn.close()
    total = sum(r["total_exec_time"] for r in rows) or 1.0
    return [{"calls": r["calls"], "total_ms": round(r["total_exec_time"], 1),
             "mean_ms": round(r["mean_exec_time"], 3), "rows": r["rows"],
             "share": round(r["total_exec_time"] / total, 3), "query": r["query"][:160]}
            for r in rows]


async def pop_runs(url: str) -> dict[str, int] | None:
    """How many claim statements ran (`queen.pop_ready`, called by the broker) and how many
    of those read messages: the rest found nothing. Counted from pg_stat_statements by
    function name (loadtest/claims.py has the names)."""
    found = await claims.statement_counts(url)
    return {"runs": found["runs"], "reads": found["reads"]} if found else None


def render(cell: str, stacks: dict[str, Any] | None, statements: list[dict[str, Any]],
           nested: list[dict[str, Any]] | None = None,
           pops: dict[str, int] | None = None) -> str:
    lines = [f"== {cell}"]
    if pops and pops["runs"]:
        empty = pops["runs"] - pops["reads"]
        lines.append(f"claim runs {pops['runs']}, of which found nothing {empty} "
                     f"({empty / pops['runs']:.1%})")
    if stacks:
        lines.append(f"py-spy: {stacks['samples']} samples, idle share {stacks['idle_share']}")
        if stacks.get("layers"):
            lines.append("  by layer (innermost library frame; share of busy samples):")
            lines += [f"    {share:6.1%}  {name}" for name, share in stacks["layers"]]
        lines.append("  own time (share of busy samples):")
        lines += [f"    {share:6.1%}  {name}" for name, share in stacks["own"][:20]]
        lines.append("  inclusive:")
        lines += [f"    {share:6.1%}  {name}" for name, share in stacks["inclusive"][:25]]
    for title, chosen in (("pg_stat_statements (by total time):", statements),
                          ("  inside functions (share among these):", nested or [])):
        if chosen:
            lines.append(title)
            lines += [f"  {s['share']:6.1%} {s['calls']:>8} calls {s['mean_ms']:>8.3f} ms  "
                      f"{s['query'][:110]}" for s in chosen]
    return "\n".join(lines) + "\n"
