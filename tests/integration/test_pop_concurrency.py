"""Many pops of one group at once, on two workers: one lease per (partition, group), so no
message goes to two pops and none is skipped (counted by offset); and a pop whose client
leaves while its claim runs loses nothing (what it leased comes back when the lease ends)."""

from __future__ import annotations

import asyncio
import random

import asyncpg
import httpx

from tests.served import fresh_connections
from tests.support import BrokerProcess, expire_leases_of, pop_json

PARTITIONS = [f"p{i}" for i in range(8)]


async def test_64_waiting_pops_of_one_group_on_two_workers_share_every_message_once(
        broker: BrokerProcess, db: asyncpg.Connection, queue_name: str) -> None:
    total = 240
    delivered: list[tuple[str, int]] = []  # (partition id, offset) per delivery
    done = asyncio.Event()

    async def consumer(http: httpx.AsyncClient) -> None:
        while not done.is_set():
            r = await http.get(f"/api/v1/pop/queue/{queue_name}", params={
                "wait": "true", "timeout": "1500", "batch": "3", "partitions": "2",
                "consumerGroup": "g"})
            assert r.status_code in (200, 204), r.text
            if r.status_code == 204:
                continue
            body = r.json()
            for m in body["messages"]:
                delivered.append((m["partitionId"], int(m["data"]["offset"])))
            r = await http.post("/api/v1/ack/batch", json={"consumerGroup": "g", "acknowledgments": [
                {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                 "leaseId": body["leaseId"], "status": "completed"} for m in body["messages"]]})
            assert r.status_code == 200 and all(x["success"] for x in r.json()), r.text
            if len(delivered) >= total:
                done.set()

    limits = httpx.Limits(max_connections=80, max_keepalive_connections=80)
    # Pushes open a connection each: no reuse of one the server may be closing as idle.
    async with httpx.AsyncClient(base_url=broker.url, timeout=30, limits=limits) as http, \
            fresh_connections(broker.url) as pusher:
        consumers = [asyncio.create_task(consumer(http)) for _ in range(64)]
        await asyncio.sleep(0.3)  # most of them parked
        rng = random.Random(7)
        next_offset = dict.fromkeys(PARTITIONS, 0)
        pushed = 0
        while pushed < total:
            items = []
            for _ in range(rng.randint(1, 6)):
                p = rng.choice(PARTITIONS)
                items.append({"queue": queue_name, "partition": p,
                              "payload": {"offset": next_offset[p]},
                              "transactionId": f"{p}-{next_offset[p]}"})
                next_offset[p] += 1
            items = items[:total - pushed]
            r = await pusher.post("/api/v1/push", json={"items": items})
            assert r.status_code == 201, r.text
            pushed += len(items)
            await asyncio.sleep(rng.random() * 0.02)
        async with asyncio.timeout(60):
            await done.wait()
        await asyncio.gather(*consumers)
    ids = dict(await db.fetch(
        "SELECT p.name, p.id::text FROM queen.log_partitions p JOIN queen.queues q"
        "    ON q.id = p.queue_id WHERE q.name = $1", queue_name))
    # Payload offsets equal log offsets: each partition's pushes were in order from 0.
    expected = sorted((ids[p], o) for p in PARTITIONS for o in range(next_offset[p]))
    assert sorted(delivered) == expected  # none twice, none skipped


async def test_a_pop_whose_client_leaves_mid_claim_loses_nothing(
        broker: BrokerProcess, db: asyncpg.Connection, queue_name: str) -> None:
    total = 80
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
        for p in PARTITIONS:
            r = await http.post("/api/v1/push", json={"items": [
                {"queue": queue_name, "partition": p, "payload": i, "transactionId": f"{p}-{i}"}
                for i in range(total // len(PARTITIONS))]})
            assert r.status_code == 201
    rng = random.Random(11)

    async def leaver() -> None:
        async with httpx.AsyncClient(base_url=broker.url, timeout=30) as c:
            task = asyncio.create_task(c.get(f"/api/v1/pop/queue/{queue_name}", params={
                "wait": "true", "timeout": "5000", "batch": "4", "partitions": "2",
                "consumerGroup": "g"}))
            await asyncio.sleep(rng.random() * 0.05)
            task.cancel()  # the client goes away, maybe while its claim runs
            await asyncio.gather(task, return_exceptions=True)

    await asyncio.gather(*(leaver() for _ in range(40)))
    expected = {f"{p}-{i}" for p in PARTITIONS for i in range(total // len(PARTITIONS))}
    got: set[str] = set()
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
        async with asyncio.timeout(30):  # a claim of a pop that left may still be finishing
            while got != expected:
                # The leases of the pops that left end now (instead of being waited out).
                await expire_leases_of(db, queue_name)
                while (body := await pop_json(http, queue_name, batch=50, partitions=8,
                                              consumerGroup="g", autoAck=True)) is not None:
                    assert not got & {m["transactionId"] for m in body["messages"]}
                    got |= {m["transactionId"] for m in body["messages"]}
                await asyncio.sleep(0.1)
    assert got == expected
