"""Conflating pops racing pushes on two workers (wire-protocol-extensions §20.3): every
partition's last push is delivered by some pop (which, since a claim sees only committed
messages, started after that push committed), a pop takes one message per partition, no
partition is ever held by two pops at once, and no lease id is shared by two pops."""

from __future__ import annotations

import asyncio
import random

import asyncpg
import httpx

from tests.support import BrokerProcess

PARTITIONS = [f"p{i}" for i in range(6)]
PUSHES_PER_PUSHER = 40
POPPERS = 4


async def test_conflating_pops_race_pushes(broker: BrokerProcess, db: asyncpg.Connection,
                                           queue_name: str) -> None:
    last: dict[str, str] = {}  # partition -> transactionId of its last push (answered)
    delivered: set[str] = set()
    leases: list[str] = []
    held: dict[str, str] = {}  # partitionId -> lease id of the pop holding it now
    pushing_done = asyncio.Event()
    done = asyncio.Event()
    violations: list[str] = []
    lock = asyncio.Lock()  # pushes of the two pushers: "last" follows the answer order

    async def pusher(n: int) -> None:
        rng = random.Random(n)
        async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
            for i in range(PUSHES_PER_PUSHER):
                p = rng.choice(PARTITIONS)
                async with lock:
                    r = await http.post("/api/v1/push", json={"items": [
                        {"queue": queue_name, "partition": p, "payload": {"i": i},
                         "transactionId": f"{n}-{i}"}]})
                    assert r.status_code == 201 and r.json()[0]["status"] == "queued", r.text
                    last[p] = f"{n}-{i}"
                await asyncio.sleep(rng.random() * 0.01)

    async def popper() -> None:
        async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
            while not done.is_set():
                r = await http.get(f"/api/v1/pop/queue/{queue_name}", params={
                    "wait": "true", "timeout": "300", "batch": "10", "consumerGroup": "g",
                    "conflation": "true"})
                assert r.status_code == 200 and r.json()["conflation"] is True, r.text
                body = r.json()
                if not body["messages"]:
                    continue
                lease = body["leaseId"]
                leases.append(lease)
                parts = [m["partitionId"] for m in body["messages"]]
                if len(parts) != len(set(parts)):
                    violations.append(f"two messages of one partition in one pop: {parts}")
                for pid in parts:
                    if pid in held:
                        violations.append(f"partition {pid} held by {held[pid]} and {lease}")
                    held[pid] = lease
                await asyncio.sleep(random.random() * 0.01)  # the handler's work
                for m in body["messages"]:
                    delivered.add(m["transactionId"])
                    del held[m["partitionId"]]  # before the ack: its commit frees it
                r = await http.post("/api/v1/ack/batch", json={
                    "consumerGroup": "g", "acknowledgments": [
                        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                         "leaseId": lease, "status": "completed"} for m in body["messages"]]})
                assert all(x["success"] for x in r.json()), r.text
                if pushing_done.is_set() and set(last.values()) <= delivered:
                    done.set()

    poppers = [asyncio.create_task(popper()) for _ in range(POPPERS)]
    await asyncio.gather(pusher(1), pusher(2))
    pushing_done.set()
    try:
        async with asyncio.timeout(60):
            while not (set(last.values()) <= delivered):
                await asyncio.sleep(0.05)
    finally:
        done.set()
        await asyncio.gather(*poppers)
    assert violations == []
    assert len(leases) == len(set(leases))
    # Every cursor ends at its partition's tail: nothing is left for the group.
    rows = await db.fetch(
        """SELECT p.name, p.last_offset, c.committed FROM queen.log_partitions p
             JOIN queen.queues q ON q.id = p.queue_id
             LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = 'g'
            WHERE q.name = $1""", queue_name)
    assert rows and all(r["committed"] == r["last_offset"] for r in rows), rows
