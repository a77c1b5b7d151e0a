"""The official client's stream runner killed (SIGKILL) mid-window and started again: every
window's result reaches the sink exactly once, with the sum of all its inputs (no input
skipped, none counted twice), because state, sink pushes and the source ack of a cycle
commit together (wire-protocol-extensions §18.3)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import asyncpg
import httpx

from tests.integration.test_streams import drain, expected_windows, push, until, window_events
from tests.support import BrokerProcess

N = 300  # events: ~43 cycles of 7


def start_runner(url: str, source: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.faults.stream_runner", url, source,
                             source + "-sink"], env=os.environ.copy())


async def test_runner_killed_mid_window_and_restarted_emits_every_window_once(
        http: httpx.AsyncClient, broker: BrokerProcess, db: asyncpg.Connection,
        queue_name: str) -> None:
    # A short lease, so the batch the killed runner held comes back soon.
    r = await http.post("/api/v1/configure", json={"queue": queue_name,
                                                   "options": {"leaseTime": 2}})
    assert r.status_code == 200, r.text
    await push(http, queue_name, window_events("P", N))
    first = start_runner(broker.url, queue_name)
    try:
        async def some_cycles() -> bool:
            cycles = await db.fetchval(
                "SELECT sum(p.cycles) FROM queen.stream_partitions p JOIN "
                "queen.stream_queries q ON q.id = p.query_id WHERE q.name = $1", queue_name)
            return bool(cycles and cycles >= 5)
        await until(some_cycles, "5 cycles by the first runner")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    committed = await db.fetchval(
        "SELECT c.committed FROM queen.log_consumers c JOIN queen.log_partitions p ON "
        "p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id "
        "WHERE q.name = $1 AND c.consumer_group = $2", queue_name, f"streams.{queue_name}")
    assert 0 <= committed < N  # killed mid-stream
    second = start_runner(broker.url, queue_name)
    expected = expected_windows(N)
    seen: list[dict[str, int]] = []
    try:
        async def done() -> bool:
            seen.extend(await drain(http, queue_name + "-sink"))
            return len(seen) >= len(expected)
        await until(done, "every window's result after the restart")
        await asyncio.sleep(1.0)
        seen.extend(await drain(http, queue_name + "-sink"))
    finally:
        second.send_signal(signal.SIGKILL)
        second.wait()
    got = sorted(((s["key"], s["windowStart"]), s["sum"]) for s in seen)
    assert got == sorted(expected.items())
