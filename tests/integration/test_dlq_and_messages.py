"""DLQ listing and replay (§5.1, §5.2) and message inspection (§5.3, §5.4) over HTTP.

DLQ rows are set up with SQL: writing them is the ack path's job, not under test here.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import asyncpg
import httpx
import pytest
from queen import Queen

from tests.support import BrokerProcess

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all


async def push_one(http: httpx.AsyncClient, queue: str, txid: str, payload: object,
                   partition: str = "Default") -> str:
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": partition, "payload": payload, "transactionId": txid}]})
    assert r.status_code == 201 and r.json()[0]["status"] == "queued", r.text
    return str(r.json()[0]["partition_id"])


async def add_dlq(db: asyncpg.Connection, pid: str, *, group: str, txid: str, payload: object,
                  age_seconds: int, offset: int = 0, error: str = "boom") -> int:
    return int(await db.fetchval(
        "INSERT INTO queen.log_dlq (partition_id, consumer_group, msg_offset, transaction_id,"
        " message_id, payload, error_message, retry_count, created_at, failed_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, 3, now() - make_interval(secs => $8),"
        " now() - make_interval(secs => $8)) RETURNING id",
        int(pid), group, offset, txid, uuid.uuid4(), json.dumps(payload).encode(), error,
        age_seconds))


async def test_dlq_listing_filters_pages_counts_and_orders_newest_first(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    pid_a = await push_one(http, queue_name, "x", 1)
    pid_b = await push_one(http, queue_name, "y", 1, partition="B")
    ids = [await add_dlq(db, pid_a, group="g1", txid=f"a{i}", payload={"n": i},
                         age_seconds=100 - i) for i in range(5)]
    await add_dlq(db, pid_b, group="g2", txid="b0", payload=[1, "two"], age_seconds=1)
    r = await http.get("/api/v1/dlq", params={"queue": queue_name})
    body = r.json()
    assert r.status_code == 200 and body["total"] == 6
    assert [m["transactionId"] for m in body["messages"]] == ["b0", "a4", "a3", "a2", "a1", "a0"]
    first = body["messages"][1]
    assert first["id"] == str(ids[4]) and first["data"] == {"n": 4}
    assert first["partitionId"] == pid_a and first["partition"] == "Default"
    assert (first["queue"], first["consumerGroup"]) == (queue_name, "g1")
    assert (first["errorMessage"], first["retryCount"]) == ("boom", 3)
    assert first["createdAt"].endswith("Z") and first["failedAt"].endswith("Z")
    r = await http.get("/api/v1/dlq", params={"queue": queue_name, "consumerGroup": "g1",
                                              "limit": 2, "offset": 1})
    body = r.json()
    assert body["total"] == 5 and body["pagination"] == {"limit": 2, "offset": 1}
    assert [m["transactionId"] for m in body["messages"]] == ["a3", "a2"]
    r = await http.get("/api/v1/dlq", params={"queue": queue_name, "partition": "B"})
    assert [m["data"] for m in r.json()["messages"]] == [[1, "two"]]
    r = await http.get("/api/v1/dlq", params={"queue": queue_name, "offset": 50})
    assert r.json() == {"messages": [], "pagination": {"limit": 100, "offset": 50}, "total": 6,
                        "truncated": False, "nextOffset": 50}
    # Half a second before a3 failed (a2 failed a second before it): taken from the row, not
    # from the clock now, so the time the listings above took does not move it.
    failed_a3 = await db.fetchval("SELECT failed_at FROM queen.log_dlq"
                                  " WHERE partition_id = $1 AND id = $2", int(pid_a), ids[3])
    cutoff = failed_a3 - timedelta(milliseconds=500)
    r = await http.get("/api/v1/dlq", params={"queue": queue_name, "consumerGroup": "g1",
                                              "from": cutoff.isoformat()})
    assert [m["transactionId"] for m in r.json()["messages"]] == ["a4", "a3"]


async def test_dlq_listing_rejects_bad_parameters(http: httpx.AsyncClient) -> None:
    for params in ({"limit": "x"}, {"limit": "0"}, {"offset": "-1"}, {"from": "yesterday"},
                   {"queue": "a\x01b"}):
        r = await http.get("/api/v1/dlq", params=params)
        assert r.status_code == 400 and "error" in r.json(), params


async def test_dlq_via_the_official_client(broker: BrokerProcess, http: httpx.AsyncClient,
                                           db: asyncpg.Connection, queue_name: str) -> None:
    pid = await push_one(http, queue_name, "x", 1)
    await add_dlq(db, pid, group="workers", txid="dead", payload={"k": "v"}, age_seconds=5)
    client = Queen(broker.url)
    try:
        res = await client.queue(queue_name).dlq("workers").limit(10).get()
    finally:
        await client.close()
    assert res["total"] == 1 and res["messages"][0]["data"] == {"k": "v"}


async def test_dlq_retry_moves_the_newest_row_and_the_payload_reappears_at_a_new_offset(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    pid = await push_one(http, queue_name, "orig", {"first": True})
    await push_one(http, queue_name, "other", 2)
    older = await add_dlq(db, pid, group="g-old", txid="orig", payload={"v": "old"},
                          age_seconds=50)
    newer = await add_dlq(db, pid, group="g-new", txid="orig", payload={"v": "new"},
                          age_seconds=10)
    r = await http.post(f"/api/v1/messages/{pid}/orig/retry")
    body = r.json()
    assert r.status_code == 200, body
    assert body["success"] is True and body["result"] == "moved"
    assert (body["queue"], body["partition"], body["consumerGroup"]) == (
        queue_name, "Default", "g-new")
    assert body["dlqId"] == str(newer) and body["originalTransactionId"] == "orig"
    assert body["dlqRowRemoved"] is True
    replayed = body["replayedAs"]
    assert replayed["status"] == "queued" and replayed["offset"] == 2
    assert replayed["transaction_id"] != "orig" and uuid.UUID(replayed["transaction_id"])
    remaining = [r["id"] for r in await db.fetch(
        "SELECT id FROM queen.log_dlq WHERE partition_id = $1", int(pid))]
    assert remaining == [older]
    r = await http.post("/api/v1/fetch", json={"entries": [{"queue": queue_name, "offset": 2}]})
    [rec] = r.json()["entries"][0]["records"]
    assert rec == {**rec, "offset": 2, "payload": {"v": "new"},
                   "transactionId": replayed["transaction_id"]}
    # The older group's row goes next, then the address is exhausted.
    r = await http.post(f"/api/v1/messages/{pid}/orig/retry")
    assert r.json()["dlqId"] == str(older) and r.json()["replayedAs"]["offset"] == 3
    r = await http.post(f"/api/v1/messages/{pid}/orig/retry")
    assert r.status_code == 404
    assert r.json() == {**r.json(), "success": False, "partitionId": pid,
                        "transactionId": "orig", "error": "Message not found"}


async def test_dlq_retry_of_a_live_message_or_unknown_partition_is_404(
        broker: BrokerProcess, http: httpx.AsyncClient, queue_name: str) -> None:
    pid = await push_one(http, queue_name, "alive", 1)
    for path in (f"{pid}/alive", "999999999/alive", "not-a-number/alive"):
        r = await http.post(f"/api/v1/messages/{path}/retry")
        assert r.status_code == 404 and r.json()["error"] == "Message not found", path


async def test_dlq_retry_via_the_official_client(broker: BrokerProcess, http: httpx.AsyncClient,
                                                 db: asyncpg.Connection, queue_name: str) -> None:
    pid = await push_one(http, queue_name, "x", 1)
    await add_dlq(db, pid, group="g", txid="poison", payload="text", age_seconds=5)
    client = Queen(broker.url)
    try:
        res = await client.admin.retry_message(pid, "poison")
    finally:
        await client.close()
    assert res["success"] is True and res["replayedAs"]["offset"] == 1


async def test_message_detail_status_follows_cursors_leases_and_the_dlq(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    pid = await push_one(http, queue_name, "m0", {"a": 1})
    await push_one(http, queue_name, "m1", {"a": 2})

    async def detail(txid: str) -> dict:  # type: ignore[type-arg]
        r = await http.get(f"/api/v1/messages/{pid}/{txid}")
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    d = await detail("m1")
    assert d["status"] == "pending" and d["data"] == d["payload"] == {"a": 2}
    assert (d["transactionId"], d["partitionId"], d["queue"]) == ("m1", pid, queue_name)
    assert d["partition"] == "Default" and d["offset"] == 1 and d["mode"]["type"] == "queue"
    assert d["queueConfig"]["leaseTime"] == 300
    r = await http.get(f"/api/v1/pop/queue/{queue_name}", params={"batch": 2})
    assert len(r.json()["messages"]) == 2
    d = await detail("m1")
    assert d["status"] == "processing" and d["leaseExpiresAt"].endswith("Z")
    await db.execute("UPDATE queen.log_consumers SET committed = 1, batch_end = NULL,"
                     " worker_id = NULL, lease_expires_at = NULL WHERE partition_id = $1",
                     int(pid))
    assert (await detail("m0"))["status"] == "completed"
    await add_dlq(db, pid, group="__QUEUE_MODE__", txid="m0", payload={"a": 1}, age_seconds=1,
                  error="bad data")
    d = await detail("m0")
    assert d["status"] == "dead_letter" and d["errorMessage"] == "bad data"
    r = await http.get(f"/api/v1/messages/{pid}/nope")
    assert r.status_code == 404 and r.json() == {"error": "Message not found"}


async def test_message_found_after_its_index_row_was_pruned(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    pid = await push_one(http, queue_name, "gone-from-index", [1, 2, 3])
    await db.execute("DELETE FROM queen.log_txn_index WHERE partition_id = $1", int(pid))
    r = await http.get(f"/api/v1/messages/{pid}/gone-from-index")
    assert r.status_code == 200 and r.json()["data"] == [1, 2, 3]


async def test_message_delete_removes_dead_letters_only(
        broker: BrokerProcess, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    pid = await push_one(http, queue_name, "live", 1)
    r = await http.delete(f"/api/v1/messages/{pid}/live")
    assert r.status_code == 404 and r.json()["success"] is False
    await add_dlq(db, pid, group="g", txid="dead", payload=1, age_seconds=1)
    client = Queen(broker.url)
    try:
        res = await client.admin.delete_message(pid, "dead")
        detail = await client.admin.get_message(pid, "live")
    finally:
        await client.close()
    assert res["success"] is True and res["transactionId"] == "dead"
    assert await db.fetchval("SELECT count(*) FROM queen.log_dlq WHERE partition_id = $1",
                             int(pid)) == 0
    assert detail["transactionId"] == "live" and detail["data"] == 1


async def test_message_listing_newest_first_with_status_filter(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    pid = None
    for i in range(4):
        pid = await push_one(http, queue_name, f"l{i}", {"i": i})
    assert pid is not None
    await db.execute("INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)"
                     " VALUES ($1, '__QUEUE_MODE__', 1)", int(pid))
    r = await http.get("/api/v1/messages", params={"queue": queue_name})
    body = r.json()
    assert body["total"] == 4
    assert [m["transactionId"] for m in body["messages"]] == ["l3", "l2", "l1", "l0"]
    assert [m["status"] for m in body["messages"]] == ["pending", "pending", "completed",
                                                       "completed"]
    r = await http.get("/api/v1/messages", params={"queue": queue_name, "status": "pending",
                                                   "limit": 1})
    assert [m["data"] for m in r.json()["messages"]] == [{"i": 3}]
    r = await http.get("/api/v1/messages", params={"status": "weird"})
    assert r.status_code == 400
