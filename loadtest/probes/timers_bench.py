"""Timers: schedule rate and fire lag, `python -m loadtest probe timers_bench`.

One run on a durable embedded PostgreSQL (fsync and synchronous_commit on), a fresh database
per round, the broker's web tier (`--workers`) and one timer firer process:

1. **Schedule rate**: `--timers` schedules (due in an hour), 256 ops per call over
   `--connections` concurrent HTTP connections, against the same ops applied by bare asyncpg
   (`queen.timers_apply`, the broker's statement, no HTTP) over as many connections, in the
   same round: ops/s and the ratio broker / bare.
2. **Fire lag**: the same timers are moved to one instant (`deliver_at = fire_at` = a whole
   second ~3 s ahead, one UPDATE), so all `--timers` fall due in the same second, and the
   firer is told when, as a schedule due before its next sweep tells it. Fire lag
   = the appended segment's `created_at` - deliverAt (both the database's clock), per timer;
   delivery lag = when a long-polling consumer (autoAck pops of up to 1000) received it -
   deliverAt (same host clock). p50/p99/max of each.
3. **Gate**: every timer delivered exactly once (the consumers' transactionIds are exactly the
   scheduled set, no repeats) and none left pending; a round that fails it reports no figures.

Rounds alternate nothing (one broker build); `--rounds` repeats and reports the median and
the range. The machine is shared: the figures are for this run only.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime
from typing import Any

import asyncpg
import httpx

from core.embedded import stop_process
from core.ids import uuid7
from core.storage.statements import QUERIES
from loadtest.launch import ROOT, Postgres, broker, fresh_database
from loadtest.probes.rounds import Rounds, arguments, in_turn

PAYLOAD_B64 = "eyJvcmRlcklkIjogIjlmMSIsICJhY3Rpb24iOiAiZXhwaXJlIn0="  # a small JSON document
PARTITIONS = 8
OPS_PER_CALL = 256


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ops(queue: str, keys: list[str]) -> list[dict[str, Any]]:
    return [{"op": "schedule", "queue": queue, "timerKey": k, "txn": k,
             "partition": f"p{i % PARTITIONS}", "delayMs": 3_600_000, "payload": PAYLOAD_B64}
            for i, k in enumerate(keys)]


async def schedule_http(url: str, queue: str, keys: list[str], connections: int) -> float:
    calls = [keys[i:i + OPS_PER_CALL] for i in range(0, len(keys), OPS_PER_CALL)]
    async with httpx.AsyncClient(base_url=url, timeout=60,
                                 limits=httpx.Limits(max_connections=connections)) as client:
        todo = iter(calls)

        async def worker() -> None:
            for chunk in todo:
                r = await client.post("/api/v1/timers", json={"operations": _ops(queue, chunk)})
                r.raise_for_status()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        return len(keys) / (time.perf_counter() - started)


async def schedule_bare(dsn: str, queue: str, keys: list[str], connections: int) -> float:
    """The broker's statement with the same arrays, straight from asyncpg."""
    sql = QUERIES["timers_apply"]
    payload = b'{"orderId": "9f1", "action": "expire"}'
    calls = [keys[i:i + OPS_PER_CALL] for i in range(0, len(keys), OPS_PER_CALL)]
    pool = await asyncpg.create_pool(dsn, min_size=connections, max_size=connections)
    try:
        todo = iter(calls)

        async def worker() -> None:
            async with pool.acquire() as conn:
                for chunk in todo:
                    n = len(chunk)
                    async with conn.transaction():
                        await conn.fetch(sql, None, [False] * n, [queue] * n, sorted(chunk),
                                         [f"p{i % PARTITIONS}" for i in range(n)],
                                         [3_600_000] * n, chunk, [uuid7() for _ in range(n)],
                                         [payload] * n, [False] * n, [False] * n, [False] * n,
                                         None)
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        return len(keys) / (time.perf_counter() - started)
    finally:
        await pool.close()


async def consume(url: str, queue: str, want: int, received: dict[str, list[float]],
                  consumers: int, deadline: float) -> None:
    async def one(client: httpx.AsyncClient) -> None:
        while sum(len(v) for v in received.values()) < want and time.monotonic() < deadline:
            r = await client.get(f"/api/v1/pop/queue/{queue}", params={
                "wait": "true", "timeout": "2000", "batch": "1000", "autoAck": "true"})
            now = time.time()
            if r.status_code == 200:
                for m in r.json()["messages"]:
                    received.setdefault(m["transactionId"], []).append(now)
    async with httpx.AsyncClient(base_url=url, timeout=30,
                                 limits=httpx.Limits(max_connections=consumers)) as client:
        await asyncio.gather(*(one(client) for _ in range(consumers)))


async def one_round(url: str, dsn: str, bare_dsn: str, n: int, connections: int,
                    consumers: int) -> dict[str, Any]:
    queue = "timers-" + uuid.uuid4().hex[:8]
    keys = [f"t{i:06d}" for i in range(n)]
    bare_rate = await schedule_bare(bare_dsn, queue, keys, connections)
    http_rate = await schedule_http(url, queue, keys, connections)
    conn = await asyncpg.connect(dsn)
    try:
        deliver_at: datetime = await conn.fetchval(
            "UPDATE queen.timers SET deliver_at = date_trunc('second', now()) "
            "+ interval '3 seconds', fire_at = date_trunc('second', now()) "
            "+ interval '3 seconds' WHERE queue = $1 RETURNING deliver_at", queue)
        # What a schedule due before the next sweep sends (core/timers/service.py).
        await conn.execute("SELECT pg_notify('queen_timers', (extract(epoch FROM $1::timestamptz "
                           "- clock_timestamp()) * 1000)::bigint::text)", deliver_at)
        received: dict[str, list[float]] = {}
        await consume(url, queue, n, received, consumers, time.monotonic() + 60)
        await asyncio.sleep(1.0)  # anything fired twice would show up by now
        await consume(url, queue, n + 1, received, 1, time.monotonic() + 1.5)
        pending = await conn.fetchval("SELECT count(*) FROM queen.timers WHERE queue = $1",
                                      queue)
        segments = await conn.fetch(
            """SELECT s.created_at, s.message_count FROM queen.log_segments s
                 JOIN queen.log_partitions p ON p.id = s.partition_id
                 JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1""", queue)
    finally:
        await conn.close()
    copies = Counter({k: len(v) for k, v in received.items()})
    gate = set(copies) == set(keys) and set(copies.values()) == {1} and pending == 0
    due = deliver_at.timestamp()
    fire_lags = [(s["created_at"].timestamp() - due) for s in segments
                 for _ in range(s["message_count"])]
    delivery_lags = [v[0] - due for v in received.values()]
    out: dict[str, Any] = {"timers": n, "gate": gate, "delivered": sum(copies.values()),
                           "distinct": len(copies), "pending_after": pending}
    if gate:
        out.update({
            "schedule_ops_per_s": round(http_rate), "bare_ops_per_s": round(bare_rate),
            "schedule_ratio": round(http_rate / bare_rate, 3),
            "fire_lag_p50_s": round(_pct(fire_lags, 0.5), 3),
            "fire_lag_p99_s": round(_pct(fire_lags, 0.99), 3),
            "fire_lag_min_s": round(min(fire_lags), 3),
            "fire_lag_max_s": round(max(fire_lags), 3),
            "delivery_lag_p50_s": round(_pct(delivery_lags, 0.5), 3),
            "delivery_lag_p99_s": round(_pct(delivery_lags, 0.99), 3),
            "segments": len(segments)})
    return out


FIGURES = ("schedule_ops_per_s", "bare_ops_per_s", "fire_lag_p50_s", "fire_lag_p99_s",
           "fire_lag_max_s", "delivery_lag_p50_s", "delivery_lag_p99_s")


def main(argv: list[str] | None = None) -> int:
    parser = arguments("timers_bench", (__doc__ or "").split("\n\n")[0], connections=8,
                       fast_database=False)
    parser.add_argument("--timers", type=int, default=10_000)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--before", help="another checkout whose timer firer runs in each "
                        "round beside this one's (before/after, in turn; the web tier is "
                        "this one's)")
    args = parser.parse_args(argv)
    rounds = Rounds("timers_bench", args)
    results: list[dict[str, Any]] = []
    with Postgres() as pg:
        for i in range(args.rounds):
            for which in in_turn(["this", "before"] if args.before else ["this"], i):
                root = args.before if which == "before" else str(ROOT)
                dsn = asyncio.run(fresh_database(pg.dsn))
                bare_dsn = asyncio.run(fresh_database(pg.dsn))
                firer = subprocess.Popen([sys.executable, "-m", "core.timers.firer"],
                                         cwd=root, env={**os.environ, "DATABASE_URL": dsn,
                                                        "PYTHONPATH": root,
                                                        "LOG_LEVEL": "warning"},
                                         start_new_session=True)
                try:
                    with broker(dsn, args.workers) as server:
                        result = asyncio.run(one_round(server.url, dsn, bare_dsn, args.timers,
                                                       args.connections, args.consumers))
                finally:
                    stop_process(firer, signal.SIGTERM, timeout=15)
                results.append({"firer": which, **result})
                for key in FIGURES:
                    if key in result:  # a round that failed the gate has no figures
                        rounds.add(f"firer {which} {key}", result[key])
            rounds.end_round()
    gates = [r["gate"] for r in results]
    rounds.detail("gate (every timer delivered exactly once, none pending)",
                  f"{'pass' if all(gates) else 'FAIL'} in {sum(gates)}/{len(gates)} rounds")
    rounds.detail("rounds", results)
    for which in ("this", "before") if args.before else ("this",):
        rounds.ratio(f"firer {which}: schedule broker / bare asyncpg",
                     f"firer {which} schedule_ops_per_s", f"firer {which} bare_ops_per_s")
    if args.before:
        rounds.ratio("fire lag p99 this / before", "firer this fire_lag_p99_s",
                     "firer before fire_lag_p99_s")
    status = rounds.finish()
    return status if all(gates) else 1


if __name__ == "__main__":
    sys.exit(main())
