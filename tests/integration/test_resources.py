"""Resource routes (§6.2) and metrics (§6.5)."""

from __future__ import annotations

import asyncpg
import httpx
from queen import Queen

from tests.support import BrokerProcess


async def setup_queue(http: httpx.AsyncClient, db: asyncpg.Connection, queue: str) -> None:
    """Partition A: 4 messages, a group committed at 1. Partition B: 2 messages, untouched."""
    for part, n in (("A", 4), ("B", 2)):
        r = await http.post("/api/v1/push", json={"items": [
            {"queue": queue, "partition": part, "payload": i} for i in range(n)]})
        assert r.status_code == 201
    await db.execute(
        "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)"
        " SELECT p.id, 'g', 1 FROM queen.log_partitions p JOIN queen.queues q"
        " ON q.id = p.queue_id WHERE q.name = $1 AND p.name = 'A'", queue)


async def test_queue_detail_depth_and_list(http: httpx.AsyncClient, db: asyncpg.Connection,
                                           queue_name: str) -> None:
    await setup_queue(http, db, queue_name)
    r = await http.get(f"/api/v1/resources/queues/{queue_name}")
    body = r.json()
    assert r.status_code == 200 and body["name"] == queue_name
    parts = {p["name"]: p for p in body["partitions"]}
    assert parts["A"]["stats"] == {"total": 4, "pending": 2, "processing": 0, "completed": 2,
                                   "failed": 0, "deadLetter": 0}
    assert parts["B"]["stats"]["pending"] == 2
    assert body["totals"]["total"] == 6 and body["totals"]["pending"] == 4
    assert body["options"]["leaseTime"] == 300 and body["segments"]["messages"] == 6
    r = await http.get(f"/api/v1/resources/queues/{queue_name}/depth")
    assert r.json() == {"queue": queue_name, "group": None, "pending": 4,
                        "partitionsPending": 2, "conflation": False, "effectivePending": 4,
                        "partitions": [{"partition": "A", "pending": 2},
                                       {"partition": "B", "pending": 2}]}
    r = await http.get(f"/api/v1/resources/queues/{queue_name}/depth", params={"group": "new"})
    assert r.json()["pending"] == 6
    r = await http.get("/api/v1/resources/queues", params={"search": queue_name})
    [q] = r.json()["queues"]
    assert q["name"] == queue_name and q["partitions"] == 2
    assert q["messages"] == {"total": 6, "pending": 4, "processing": 0}
    r = await http.get("/api/v1/resources/queues/missing-" + queue_name)
    assert r.status_code == 404 and r.json() == {"error": "Queue not found"}
    r = await http.get("/api/v1/resources/queues/missing-" + queue_name + "/depth")
    assert r.status_code == 404
    r = await http.get("/api/v1/resources/queues", params={"limit": "lots"})
    assert r.status_code == 400


async def test_partitions_namespaces_tasks_overview_metrics(
        broker: BrokerProcess, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    queue = f"ns{queue_name[2:]}.job.x"
    await setup_queue(http, db, queue)
    client = Queen(broker.url)
    try:
        parts = await client.admin.get_partitions(queue=queue)
        namespaces = await client.admin.get_namespaces()
        tasks = await client.admin.get_tasks()
        overview = await client.admin.get_overview()
        depth = await client.admin.get_queue_depth(queue, "g")
        metrics = await client.admin.metrics()
    finally:
        await client.close()
    assert sorted(p["name"] for p in parts["partitions"]) == ["A", "B"]
    [ns] = [n for n in namespaces["namespaces"] if n["namespace"] == queue.split(".")[0]]
    assert ns == {"namespace": queue.split(".")[0], "queues": 1, "partitions": 2,
                  "messages": {"total": 6, "pending": 4}}
    assert any(t["task"] == "job" for t in tasks["tasks"])
    assert overview["queues"] >= 1 and overview["messages"]["total"] >= 6
    assert depth["pending"] == 2 + 2 and depth["group"] == "g"
    assert metrics["database"]["poolSize"] >= 1 and metrics["messages"]["total"] >= 6
    r = await http.get("/metrics/prometheus")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "\nqueen_queues " in r.text and "# TYPE queen_leases_active gauge" in r.text


async def test_status_routes_answer_small_objects(
        broker: BrokerProcess, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    await setup_queue(http, db, queue_name)
    client = Queen(broker.url)
    try:
        overall = await client.admin.get_status()
        detail = await client.admin.get_queue_detail(queue_name)
        stats = await client.admin.get_queue_stats(limit=5)
        await client.admin.get_analytics(interval="day")
        refreshed = await client.admin.refresh_consumer_stats()
    finally:
        await client.close()
    assert overall["queues"] >= 1
    assert detail["totals"] == {"total": 6, "pending": 4, "processing": 0, "completed": 2,
                                "failed": 0, "deadLetter": 0}
    assert len(stats["queues"]) <= 5 and refreshed["success"] is True
    r = await http.get(f"/api/v1/status/queues/{queue_name}/messages", params={"limit": 2})
    assert r.json()["total"] == 6 and len(r.json()["messages"]) == 2
    r = await http.get("/api/v1/status/queues/missing-" + queue_name)
    assert r.status_code == 404
