"""What the coordinator of a Citus cell spends its CPU on (`python -m loadtest citus
--profile-coordinator`): per process kind and per statement.

A thread samples the coordinator's processes twice a second while the cell runs: the CPU of
each (psutil), and what it is (`pg_stat_activity`: its backend type, and for the broker's
connections the role in their application_name; the wake-up connections are told apart by
what they last ran: a NOTIFY, or the LISTEN connection's statements). Backends that come
and go are counted for the time they were seen, as the cell's own CPU figures are.
`pg_stat_statements` (loaded on every node of the cluster for this run) is reset before the
cell and read after it: the coordinator's statements by calls and by execution time.

The sampling connection is a backend of the coordinator too (`loadtest-profile`): its cost
is listed with the others.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import asyncpg
import psutil  # type: ignore[import-untyped]

# Loaded beside Citus (first: Citus requires it) on every node of a profiled cluster.
PRELOAD = "citus,pg_stat_statements"
_APPLICATION = "loadtest-profile"
_EVERY_S = 0.5


class CoordinatorProfile:
    """Samples the processes of the coordinator at `dsn` (postmaster `pid`) until `stop`."""

    def __init__(self, dsn: str, pid: int) -> None:
        self._dsn = dsn
        self._pid = pid
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._kind: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> None:
        asyncio.run(_statements(self._dsn, "SELECT pg_stat_statements_reset()"))
        self._thread.start()

    def stop(self, delivered: int) -> dict[str, Any]:
        """Stop sampling; answer the CPU per kind of process (s, and µs per delivered
        message) and the statements."""
        self._stop.set()
        self._thread.join()
        by_kind: dict[str, float] = {}
        for pid, last in self._last.items():
            kind = self._kind.get(pid, "unknown")
            by_kind[kind] = by_kind.get(kind, 0.0) + last - self._first[pid]
        per = max(delivered, 1)
        return {
            "cpu_by_process": [{"process": k, "cpu_s": round(v, 3),
                                "us_per_message": round(v / per * 1e6, 1)}
                               for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])],
            "statements_by_calls": asyncio.run(_statements(self._dsn, _TOP.format("calls"))),
            "statements_by_time": asyncio.run(_statements(
                self._dsn, _TOP.format("total_exec_time"))),
        }

    async def _run(self) -> None:
        conn = await asyncpg.connect(self._dsn,
                                     server_settings={"application_name": _APPLICATION})
        try:
            postmaster = psutil.Process(self._pid)
            while not self._stop.is_set():
                rows = await conn.fetch(
                    "SELECT pid, backend_type, application_name, query FROM pg_stat_activity")
                seen = {r["pid"]: r for r in rows}
                for proc in [postmaster, *postmaster.children()]:
                    try:
                        times = proc.cpu_times()
                    except psutil.Error:
                        continue
                    self._first.setdefault(proc.pid, times.user + times.system)
                    self._last[proc.pid] = times.user + times.system
                    row = seen.get(proc.pid)
                    if row is not None and self._kind.get(proc.pid) in (None, "queen-broker-wakeup"):
                        self._kind[proc.pid] = _kind(row)
                    elif proc.pid == self._pid:
                        self._kind[proc.pid] = "postmaster"
                await asyncio.sleep(_EVERY_S)
        finally:
            await conn.close()


def _kind(row: asyncpg.Record) -> str:
    """A backend's kind: its backend type, and the application of a client backend (a Citus
    connection from another node is `citus_internal`, whatever its global pid)."""
    if row["backend_type"] != "client backend":
        return str(row["backend_type"])
    name = str(row["application_name"] or "")
    if name.startswith("citus_internal"):
        return "citus_internal (from another node)"
    if name == "queen-broker-wakeup":
        query = str(row["query"] or "")
        # Until it has run anything, a wake-up connection is not told apart (asked again).
        return (f"{name} (notify)" if "pg_notify" in query
                else f"{name} (listen)" if query else name)
    return name or "(no application_name)"


_TOP = ("SELECT calls, rows, round(total_exec_time::numeric, 1)::float8 AS exec_ms, toplevel,"
        "       left(regexp_replace(query, '\\s+', ' ', 'g'), 120) AS query"
        "  FROM pg_stat_statements ORDER BY {} DESC LIMIT 15")


async def _statements(dsn: str, sql: str) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(dsn, server_settings={"application_name": _APPLICATION})
    try:
        if "reset" in sql:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return [dict(r) for r in await conn.fetch(sql)]
    finally:
        await conn.close()


def render(profile: dict[str, Any]) -> list[str]:
    """The profile as lines of the text report."""
    lines = ["    coordinator CPU by process (s, us per delivered message):"]
    for row in profile["cpu_by_process"]:
        if row["cpu_s"] > 0:
            lines.append(f"      {row['cpu_s']:>7.2f} {row['us_per_message']:>7.1f}  "
                         f"{row['process']}")
    lines.append("    coordinator statements by calls (calls, rows, exec ms, top-level):")
    for row in profile["statements_by_calls"][:10]:
        lines.append(f"      {row['calls']:>7} {row['rows']:>7} {row['exec_ms']:>8.1f} "
                     f"{'t' if row['toplevel'] else 'f'}  {row['query'][:90]}")
    lines.append("    coordinator statements by execution time:")
    for row in profile["statements_by_time"][:10]:
        lines.append(f"      {row['calls']:>7} {row['rows']:>7} {row['exec_ms']:>8.1f} "
                     f"{'t' if row['toplevel'] else 'f'}  {row['query'][:90]}")
    return lines
