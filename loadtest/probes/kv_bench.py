"""KV and lock throughput, measured: `python -m loadtest probe kv_bench`.

A durable embedded PostgreSQL (fsync and synchronous_commit on) and the broker's web workers
on a fresh database. For each op (`put`, `get`, `incr`) and each call size (1 and 100 ops per
call), `--connections` keep-alive connections send `POST /api/v1/kv` for `--seconds`; then,
in the same round, a bare asyncpg pool of as many connections runs the same statements
(`core.storage.kv`: the row locks with their versions and the write, in one transaction per
call; the unlocked read for `get`) with the call's parameters prepared in advance, which is
the storage ceiling: what the broker loses against it is lost above the database. Reported
per cell: KV ops/s of both and their ratio (median over `--rounds`, each round alternating
the two). Each connection writes keys of its own (no lock waits between connections).

Locks: acquire+release cycles/s through `POST /api/v1/locks` (one acquire, then a release when
granted; a refused acquirer waits 100 ms before it asks again, as the official client's
`Lock.acquire(wait=...)` first does) on 1 name (every connection competes for it) and on
1,000 names (a random one per cycle), with the share of acquires refused.

Load goes only to 127.0.0.1; loops are bounded by time; only processes this command started
are signalled. The machine may be shared: compare ratios, not absolute figures.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg

from core.storage import kv as store
from loadtest import launch
from loadtest.httpc import Connection
from loadtest.probes.rounds import Rounds, arguments, in_turn

OPS = ("put", "get", "incr")
SIZES = (1, 100)
KEYS_PER_CONNECTION = 1000
RETRY_PAUSE = 0.1  # seconds a refused acquirer waits before it asks again


def _keys(worker: int, call: int, size: int) -> list[str]:
    start = (call * size) % KEYS_PER_CONNECTION
    return [f"w{worker}/k{(start + i) % KEYS_PER_CONNECTION}" for i in range(size)]


def _body(op: str, worker: int, call: int, size: int) -> bytes:
    keys = _keys(worker, call, size)
    ops: list[dict[str, object]]
    if op == "get":
        ops = [{"op": "get", "ns": "bench", "key": k} for k in keys]
    elif op == "put":
        ops = [{"op": "put", "ns": "bench", "key": k, "value": {"n": call}, "ttlSeconds": 3600}
               for k in keys]
    else:
        ops = [{"op": "incr", "ns": "bench", "key": k, "delta": 1, "forever": True}
               for k in keys]
    return json.dumps({"operations": ops}).encode()


async def _for(seconds: float, connections: int,
               step: Callable[[int, int], Awaitable[int]]) -> float:
    """Run `step(worker, call)` on every connection until the time is up; answer ops/s."""
    deadline = time.monotonic() + seconds
    done = [0]

    async def worker(w: int) -> None:
        call = 0
        while time.monotonic() < deadline:
            # Not `done[0] += await ...`: that reads done[0] before the await and loses the
            # other workers' counts.
            n = await step(w, call)
            done[0] += n
            call += 1

    started = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(connections)))
    return done[0] / (time.monotonic() - started)


async def broker_rate(url: str, op: str, size: int, connections: int, seconds: float) -> float:
    conns = [Connection(url) for _ in range(connections)]

    async def step(w: int, call: int) -> int:
        answer = await conns[w].request("POST", "/api/v1/kv", _body(op, w, call, size))
        if answer.status != 200:
            raise RuntimeError(f"kv call answered {answer.status}: {answer.body[:200]!r}")
        return size

    try:
        return await _for(seconds, connections, step)
    finally:
        for c in conns:
            await c.close()


async def bare_rate(dsn: str, op: str, size: int, connections: int, seconds: float) -> float:
    pool = await asyncpg.create_pool(dsn, min_size=connections, max_size=connections)
    assert pool is not None
    until = datetime.now(UTC) + timedelta(hours=1)

    async def step(w: int, call: int) -> int:
        keys = [("bench", k) for k in _keys(w, call, size)]
        async with pool.acquire() as proxy:
            conn: asyncpg.Connection = proxy  # type: ignore[assignment]
            if op == "get":
                await store.live_rows(conn, tenant="", keys=keys)
                return size
            async with conn.transaction():
                locked = await store.lock_rows(conn, tenant="", keys=sorted(keys))
                await store.write_rows(conn, tenant="", writes=[
                    store.RowWrite(r.ns, r.key, str(call) if op == "incr" else '{"n":1}',
                                   r.next_version, None if op == "incr" else until, False)
                    for r in locked], deletes=[])
        return size

    try:
        return await _for(seconds, connections, step)
    finally:
        await pool.close()


async def lock_rate(url: str, names: int, connections: int, seconds: float) -> tuple[float, float]:
    """Acquire+release cycles/s, and the share of acquires refused."""
    conns = [Connection(url) for _ in range(connections)]
    refused = [0, 0]

    async def step(w: int, call: int) -> int:
        name = f"bench-{random.randrange(names)}"
        answer = await conns[w].request("POST", "/api/v1/locks", json.dumps([
            {"op": "acquire", "name": name, "ttlSeconds": 30, "owner": f"w{w}"}]).encode())
        [result] = json.loads(answer.body)["results"]
        refused[1] += 1
        if not result["acquired"]:
            refused[0] += 1
            # The official client's Lock.acquire(wait=...) comes back after 100 ms (then
            # longer); a loop without the pause would measure refusals, not handoffs.
            await asyncio.sleep(RETRY_PAUSE)
            return 0
        await conns[w].request("POST", "/api/v1/locks", json.dumps([
            {"op": "release", "name": name, "token": result["token"]}]).encode())
        return 1

    try:
        rate = await _for(seconds, connections, step)
    finally:
        for c in conns:
            await c.close()
    return rate, refused[0] / max(refused[1], 1)


async def _seed(url: str, connections: int) -> None:
    """Every key the `get` cells read exists."""
    conn = Connection(url)
    try:
        for w in range(connections):
            for call in range(KEYS_PER_CONNECTION // 100):
                await conn.request("POST", "/api/v1/kv", _body("put", w, call, 100))
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    args = arguments("kv_bench", __doc__ or "", seconds=5.0,
                     fast_database=False).parse_args(argv)
    cells = [(op, size) for op in OPS for size in SIZES]
    rounds = Rounds("kv_bench", args)
    with launch.Postgres() as pg:
        url = str(launch.run_sync(launch.fresh_database(pg.dsn)))
        with launch.broker(url, args.workers) as server:
            launch.run_sync(_seed(server.url, args.connections))
            for r in range(args.rounds):
                for op, size in cells:
                    for side in in_turn(("broker", "bare asyncpg"), r):
                        rate = (broker_rate(server.url, op, size, args.connections,
                                            args.seconds) if side == "broker" else
                                bare_rate(url, op, size, args.connections, args.seconds))
                        rounds.add(f"{op} x{size} {side} ops/s",
                                   float(launch.run_sync(rate)))  # type: ignore[arg-type]
                for names in (1, 1000):
                    answered = launch.run_sync(lock_rate(
                        server.url, names, args.connections, args.seconds))
                    assert isinstance(answered, tuple)
                    rounds.add(f"locks on {names} names cycles/s", answered[0])
                    rounds.add(f"locks on {names} names: share of acquires refused",
                               answered[1])
                rounds.end_round()
    for op, size in cells:
        rounds.ratio(f"{op} x{size} broker / bare asyncpg", f"{op} x{size} broker ops/s",
                     f"{op} x{size} bare asyncpg ops/s")
    rounds.ratio("locks cycles/s 1 name / 1000 names", "locks on 1 names cycles/s",
                 "locks on 1000 names cycles/s")
    return rounds.finish()

if __name__ == "__main__":
    raise SystemExit(main())
