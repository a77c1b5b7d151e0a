"""Timers under faults (§16.4): every timer fires exactly once when the firer (the reaper
process, under `queen-broker serve`) is killed -9 mid-burst and restarted, when two brokers fire from one
database, and when PostgreSQL is killed mid-burst and restarted. Deliveries are counted in
the log itself (every stored record of the queue, by transactionId)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from core.embedded import stop_process
from tests.served import Served, eventually
from tests.support import (
    BrokerProcess,
    create_database,
    fetch_records,
    restart_embedded,
    server_data_dir,
    wait_for,
)
from tests.timer_support import FirerProcess


async def schedule(client: httpx.AsyncClient, queue: str, txns: list[str], delay_ms: int,
                   partitions: int = 4) -> None:
    """One timer per txn (key = txn), over `partitions` partitions, 256 ops per call."""
    for start in range(0, len(txns), 256):
        ops = [{"op": "schedule", "queue": queue, "timerKey": t, "txn": t,
                "partition": f"p{i % partitions}", "delayMs": delay_ms,
                "payload": "eyJvayI6IHRydWV9"}  # {"ok": true}
               for i, t in enumerate(txns[start:start + 256], start)]
        r = await client.post("/api/v1/timers", json={"operations": ops}, timeout=60)
        assert r.status_code == 200, r.text
        assert {e["status"] for e in r.json()["results"]} == {"scheduled"}


async def pending(url: str, queue: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM queen.timers WHERE queue = $1",
                                       queue))
    finally:
        await conn.close()


async def stored(client: httpx.AsyncClient, queue: str, partitions: int = 4) -> Counter[str]:
    """transactionId -> how many records of the queue carry it."""
    seen: Counter[str] = Counter()
    for p in range(partitions):
        entry = await fetch_records(client, queue, f"p{p}")
        seen.update(r["transactionId"] for r in entry["records"])
    return seen


async def until_drained(url: str, queue: str, timeout: float = 90) -> None:
    async def drained() -> bool:
        try:
            return await pending(url, queue) == 0
        except (OSError, asyncpg.PostgresError):
            return False
    await wait_for(drained, timeout=timeout, interval=0.2)


@pytest.fixture
async def own_database(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


async def test_kill_9_of_the_reaper_firing_mid_burst_fires_every_timer_exactly_once(
        own_database: str, tmp_path: Path, queue_name: str) -> None:
    # Small fire batches, so the burst spans many transactions and the kill lands inside it.
    with Served(tmp_path / "serve.log", workers=1,
                env={"DATABASE_URL": own_database, "TIMERS_FIRE_BATCH": "10"}) as served:
        (firer,) = served.children("reaper")
        # The reaper process fires timers: serve starts no process of the firer's own.
        assert served.descendants("core.timers.firer") == []
        await eventually(lambda: f" {firer} INFO queen.timers: timer firer running"
                         in served.log(), timeout=30)
        txns = [f"t{i}" for i in range(3000)]
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            await schedule(client, queue_name, txns, delay_ms=1500)
            await wait_for(lambda: _fired_some(own_database, queue_name, len(txns)),
                           timeout=30, interval=0.01)
            os.kill(firer, signal.SIGKILL)
            left = await pending(own_database, queue_name)
            assert 0 < left < len(txns), left  # the kill came mid-burst
            restarted = await eventually(
                lambda: (r := served.children("reaper")) and firer not in r and r, timeout=20)
            assert restarted
            await until_drained(own_database, queue_name)
            counts = await stored(client, queue_name)
    assert set(counts) == set(txns) and set(counts.values()) == {1}
    assert f"reaper (pid {firer} was killed by SIGKILL)" in served.log()


async def _fired_some(url: str, queue: str, total: int) -> bool:
    return await pending(url, queue) < total


async def test_two_brokers_over_one_database_fire_each_timer_once(
        own_database: str, queue_name: str) -> None:
    txns = [f"t{i}" for i in range(2000)]
    with BrokerProcess(own_database, workers=1) as one, \
            BrokerProcess(own_database, workers=1) as two, \
            FirerProcess(own_database, TIMERS_FIRE_BATCH="50"), \
            FirerProcess(own_database, TIMERS_FIRE_BATCH="50"):
        async with httpx.AsyncClient(base_url=one.url, timeout=30) as a, \
                httpx.AsyncClient(base_url=two.url, timeout=30) as b:
            await asyncio.gather(schedule(a, queue_name, txns[::2], delay_ms=1000),
                                 schedule(b, queue_name, txns[1::2], delay_ms=1000))
            await until_drained(own_database, queue_name)
            counts = await stored(b, queue_name)
    assert set(counts) == set(txns) and set(counts.values()) == {1}


@pytest.fixture
def restartable_pg() -> Iterator[Path]:
    with server_data_dir("queen-timers-pg-") as data:
        yield data


async def test_database_killed_mid_burst_loses_no_timer(
        restartable_pg: Path, queue_name: str) -> None:
    # synchronous_commit on: what a schedule answered must survive the crash.
    pg, pg_proc = restart_embedded(restartable_pg, synchronous_commit="on")
    txns = [f"t{i}" for i in range(2000)]
    try:
        with BrokerProcess(pg.dsn, workers=1) as broker, \
                FirerProcess(pg.dsn, TIMERS_FIRE_BATCH="20"):
            async with httpx.AsyncClient(base_url=broker.url, timeout=30) as client:
                await schedule(client, queue_name, txns, delay_ms=1500)
                await wait_for(lambda: _fired_some(pg.dsn, queue_name, len(txns)),
                               timeout=30, interval=0.01)
                pg_proc.kill()
                pg_proc.wait()
                # While it is away the timer routes answer 503 timers_unavailable.
                r = await client.get(f"/api/v1/timers/{queue_name}")
                assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
                assert r.json()["error"] == "timers_unavailable"
                pg, pg_proc = restart_embedded(restartable_pg, synchronous_commit="on")
                await until_drained(pg.dsn, queue_name)
                broker.wait_healthy(30)
                counts = await stored(client, queue_name)
        assert set(counts) == set(txns) and set(counts.values()) == {1}
    finally:
        stop_process(pg_proc, signal.SIGINT)
