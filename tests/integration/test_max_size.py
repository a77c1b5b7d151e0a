"""`maxSize` (wire-protocol §4.9): accepted and echoed, and enforced at push with Queen's
"would exceed max capacity" refusal; nothing is written when refused; consumption (the
slowest cursor moving) frees room. Through the HTTP API and the official client."""

from __future__ import annotations

import asyncpg
import httpx
import pytest
from queen import Queen

from tests.support import BrokerProcess

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all

FULL = "would exceed max capacity (10)"


async def stored(db: asyncpg.Connection, queue: str) -> int:
    return int(await db.fetchval(
        "SELECT coalesce(sum(p.last_offset + 1), 0) FROM queen.log_partitions p "
        "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1", queue))


async def push(http: httpx.AsyncClient, queue: str, n: int, partition: str = "A"
               ) -> list[str]:
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": partition, "payload": {"i": i}} for i in range(n)]})
    assert r.status_code == 201, r.text
    return [e["status"] if e["status"] != "failed" else e["error"] for e in r.json()]


async def test_pushes_over_max_size_are_refused_whole_and_consumption_frees_room(
        broker: BrokerProcess, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    async with Queen(broker.url) as client:
        created = await client.queue(queue_name).config({"max_size": 10}).create()
    assert created["options"]["maxSize"] == 10
    assert await push(http, queue_name, 6) == ["queued"] * 6
    assert await push(http, queue_name, 4, partition="B") == ["queued"] * 4
    refused = await push(http, queue_name, 3)
    assert len(refused) == 3 and all(f"Queue '{queue_name}' {FULL}" == e for e in refused)
    assert await push(http, queue_name, 1, partition="C") == [f"Queue '{queue_name}' {FULL}"]
    assert await stored(db, queue_name) == 10  # nothing written by the refusals
    # A group reads 5 of partition A and acks them: room for 5 more.
    r = await http.get(f"/api/v1/pop/queue/{queue_name}/partition/A",
                       params={"batch": "5", "wait": "false", "consumerGroup": "g"})
    body = r.json()
    assert len(body["messages"]) == 5
    r = await http.post("/api/v1/ack/batch", json={"consumerGroup": "g", "acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "status": "completed", "leaseId": m["leaseId"]} for m in body["messages"]]})
    assert [e["success"] for e in r.json()] == [True] * 5
    assert await push(http, queue_name, 5) == ["queued"] * 5
    assert (await push(http, queue_name, 1))[0].endswith(FULL)


async def test_the_official_client_push_raises_with_the_capacity_text(
        broker: BrokerProcess, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    async with Queen(broker.url) as client:
        await client.queue(queue_name).config({"max_size": 10}).create()
        await client.queue(queue_name).push([{"data": {"i": i}} for i in range(10)])
        with pytest.raises(Exception, match=FULL.replace("(", r"\(").replace(")", r"\)")):
            await client.queue(queue_name).push([{"data": {"i": 10}}])
    assert await stored(db, queue_name) == 10
    # Lowering maxSize below what is stored refuses every push until consumption.
    r = await http.post("/api/v1/configure", json={"queue": queue_name,
                                                   "options": {"maxSize": 0}})
    assert r.json()["options"]["maxSize"] == 0
    assert await push(http, queue_name, 1, partition="Default") == ["queued"]
