"""A web worker killed (kill -9) while acks flow, coalesced into flushes: every ack the
broker answered with success is committed. A flush's requests are answered only after its
statement returned, so a worker that dies mid-flush has answered nobody of that flush.

Which flush the kill lands in is up to the machine: with 16 consumers acking through two
workers, flushes are in flight most of the time. The victim's unanswered pops keep their
partitions leased; a short lease hands them back, or a machine where the victim held every
partition's lease would see nothing delivered until the default 300 s lease ran out (CI did).
"""

from __future__ import annotations

import asyncio
import os
import signal

import asyncpg
import httpx

from tests.served import Served, fresh_connections
from tests.support import configure, wait_for

PARTITIONS = [f"p{i}" for i in range(8)]
PER_PARTITION = 60
LEASE_SECONDS = 3


async def test_no_acknowledged_ack_is_lost_when_a_worker_dies_mid_flush(
        served: Served, own_database: str) -> None:
    queue = "ackkill"
    async with fresh_connections(served.url) as http:
        await configure(http, queue, leaseTime=LEASE_SECONDS)
        for p in PARTITIONS:
            r = await http.post("/api/v1/push", json={"items": [
                {"queue": queue, "partition": p, "payload": {"offset": i},
                 "transactionId": f"{p}-{i}"} for i in range(PER_PARTITION)]})
            assert r.status_code == 201, r.text
    acknowledged: list[tuple[str, int]] = []  # (partition id, offset) answered success
    stop = asyncio.Event()

    async def consumer() -> None:
        while not stop.is_set():
            try:
                async with fresh_connections(served.url, timeout=10) as c:
                    r = await c.get(f"/api/v1/pop/queue/{queue}", params={
                        "wait": "true", "timeout": "500", "batch": "3", "consumerGroup": "g"})
                    if r.status_code != 200:
                        continue
                    body = r.json()
                    r = await c.post("/api/v1/ack/batch", json={
                        "consumerGroup": "g", "acknowledgments": [
                            {"transactionId": m["transactionId"],
                             "partitionId": m["partitionId"], "leaseId": body["leaseId"],
                             "status": "completed"} for m in body["messages"]]})
                    if r.status_code == 200:
                        for m, verdict in zip(body["messages"], r.json(), strict=True):
                            if verdict["success"]:
                                acknowledged.append((m["partitionId"],
                                                     m["data"]["offset"]))
            except httpx.HTTPError:
                await asyncio.sleep(0.05)  # the worker died under us: try again

    def at_least(n: int):  # type: ignore[no-untyped-def]
        async def check() -> bool:
            return len(acknowledged) >= n
        return check

    consumers = [asyncio.create_task(consumer()) for _ in range(16)]
    try:
        await wait_for(at_least(60), timeout=60)
        victim = served.children("web")[0]
        os.kill(victim, signal.SIGKILL)
        await wait_for(at_least(len(acknowledged) + 60), timeout=120)
    finally:
        stop.set()
        await asyncio.gather(*consumers)
    conn = await asyncpg.connect(own_database)
    try:
        committed = {str(r["partition_id"]): r["committed"] for r in await conn.fetch(
            "SELECT partition_id, committed FROM queen.log_consumers"
            " WHERE consumer_group = 'g'")}
    finally:
        await conn.close()
    lost = [(pid, off) for pid, off in acknowledged if committed.get(pid, -1) < off]
    assert lost == []
