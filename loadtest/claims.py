"""Claim statements, and how many of them found nothing (issue 26: W2/W3/W4 and the scale cell).

A claim statement is one run of the broker's claim in PostgreSQL: what a pop (or a long poll's
re-check) runs to take partitions for a group. One that found nothing is work PostgreSQL did
for an empty answer. The figure must survive a rewrite of the read path (the claim function
may be renamed or split), so it is read from the first of these sources that answers:

1. **The broker's own counters** on `/metrics/prometheus`: `queen_cluster_claim_statements`
   and `queen_cluster_claim_statements_empty` (BROKER_COUNTERS), counted by the ready set's
   reader for every claim it sends, whatever its SQL functions are called. Cluster counters
   are flushed by each web worker every METRICS_FLUSH_MS, so a reading waits one flush first.
2. **pg_stat_statements** in the broker's database (the self-contained runs preload it with
   `track = all`, loadtest/launch.py), for a broker without those counters: statements that
   call one of CLAIM_FUNCTIONS count one claim run each; statements, top-level or nested in a
   function, that call one of READ_FUNCTIONS count a run that took something
   (queen.pop_ready reads segments only when it claimed). Found nothing = claim runs -
   reads.

Any other statement calling a `queen.*pop*` or `queen.*claim*` function (not one of the
known helpers, HELPERS) is reported under `other` with its calls, so a renamed or new claim
function shows up in the results instead of silently reading 0.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import asyncpg

from loadtest.httpc import Connection

# Source 1: the broker's counters (Prometheus names), read first when the broker has them.
BROKER_COUNTERS = ("queen_cluster_claim_statements", "queen_cluster_claim_statements_empty")
# Source 2: function names in pg_stat_statements. Each run of a CLAIM function is one claim
# statement; a READ function runs once per claim run that took something. Add the read
# path's new names here when it changes: queen.pop_ready claims known candidates (a pop's
# first statement on a lane, which only names the queue, counts as one that found nothing).
# Migration 093 dropped the scanning pop (queen.pop, queen.pop_shared, queen.pop_eligible).
CLAIM_FUNCTIONS = ("queen.pop_ready",)
READ_FUNCTIONS = ("queen.pop_read",)
# Called by the claim function, not a claim run itself: never "other".
HELPERS = ("queen.pop_claim",)


def _calls(names: tuple[str, ...]) -> re.Pattern[str]:
    # `queen.pop_ready(` but not `queen.pop_ready_x(`: the name, then the opening parenthesis.
    return re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\s*\(")


async def _prometheus(url: str, wait_s: float) -> dict[str, float] | None:
    conn = Connection(url)
    try:
        if wait_s:
            await asyncio.sleep(wait_s)
        answer = await conn.request("GET", "/metrics/prometheus", timeout=10)
    except Exception:  # noqa: BLE001 - no metrics route: the next source answers
        return None
    finally:
        await conn.close()
    if answer.status != 200:
        return None
    values: dict[str, float] = {}
    for line in answer.body.decode(errors="replace").splitlines():
        name, _, value = line.partition(" ")
        name = name.removesuffix("_total")
        if name in BROKER_COUNTERS:
            try:
                values[name] = float(value.split()[0])
            except (ValueError, IndexError):
                continue
    return values if len(values) == len(BROKER_COUNTERS) else None


async def statement_counts(database_url: str) -> dict[str, Any] | None:
    conn = await asyncpg.connect(database_url)
    try:
        if not await conn.fetchval(
                "SELECT current_setting('shared_preload_libraries') ~ 'pg_stat_statements'"):
            return None  # not loaded: creating the extension would leave a broken view
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        rows = await conn.fetch(
            """SELECT query, calls FROM pg_stat_statements
                WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND query ~ '\\mqueen\\.\\w*(pop|claim)\\w*\\s*\\('""")
    except asyncpg.PostgresError:  # not preloaded on an operator's server
        return None
    finally:
        await conn.close()
    claim, read = _calls(CLAIM_FUNCTIONS), _calls(READ_FUNCTIONS)
    runs = reads = 0
    other: dict[str, int] = {}
    for r in rows:
        q = r["query"]
        if claim.search(q):
            runs += r["calls"]
        elif read.search(q):
            reads += r["calls"]
        else:
            for name in re.findall(r"queen\.\w+(?=\s*\()", q):
                if ("pop" in name or "claim" in name) and name not in HELPERS:
                    other[name] = other.get(name, 0) + r["calls"]
    return {"runs": runs, "reads": reads, "other": other}


async def snapshot(database_url: str | None, broker_url: str | None = None, *,
                   flush_wait_s: float = 0.0) -> dict[str, Any] | None:
    """Cumulative counts now: {"source", "runs", "reads", "other"}, or None when no source
    answers (an operator's server without pg_stat_statements and a broker without the
    counters). Diff two snapshots with `between`."""
    if broker_url:
        counters = await _prometheus(broker_url, flush_wait_s)
        if counters is not None:
            runs = int(counters[BROKER_COUNTERS[0]])
            return {"source": "broker /metrics", "runs": runs,
                    "reads": runs - int(counters[BROKER_COUNTERS[1]]), "other": {}}
    if database_url:
        found = await statement_counts(database_url)
        if found is not None:
            return {"source": "pg_stat_statements", **found}
    return None


def between(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """Claim runs between two snapshots, those that found nothing, and their share."""
    if not before or not after or before["source"] != after["source"]:
        return None
    runs = after["runs"] - before["runs"]
    empty = runs - (after["reads"] - before["reads"])
    other = {k: v - before["other"].get(k, 0) for k, v in after["other"].items()
             if v - before["other"].get(k, 0)}
    out: dict[str, Any] = {"source": after["source"], "runs": runs, "found_nothing": empty,
                           "found_nothing_share": round(empty / runs, 4) if runs else None}
    if other:
        out["other_claim_like_calls"] = other  # a function not in CLAIM/READ_FUNCTIONS
    return out


def describe(c: dict[str, Any] | None) -> str:
    if not c:
        return "claim statements: not measured (no broker counter, no pg_stat_statements)"
    share = c["found_nothing_share"]
    text = (f"claim statements {c['runs']}, found nothing {c['found_nothing']}"
            + (f" ({share:.1%})" if share is not None else "") + f" [{c['source']}]")
    if c.get("other_claim_like_calls"):
        text += f"; unlisted claim-like functions: {c['other_claim_like_calls']}"
    return text
