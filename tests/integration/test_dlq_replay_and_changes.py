"""DLQ replay by row id and bulk purge (wire-protocol §11), and `POST /api/v1/partitions/changed`
(§6.6, the official client's `changed_since`)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import asyncpg
import httpx
import pytest
from queen import Queen

from core.storage.cluster import only_host
from core.storage.hosts import dsn_hosts
from tests.support import BrokerProcess, pop_json, push_items

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all


async def dead_letters(http: httpx.AsyncClient, queue: str, n: int, *, group: str | None = None,
                       partition: str = "Default", prefix: str = "d") -> list[dict[str, Any]]:
    """Push n messages and dead-letter them all (an ack with status dlq, one message at a
    time: in one batch the lowest dlq signal acts and the rest is released) for `group`."""
    await push_items(http, queue, [{"n": i} for i in range(n)], partition=partition,
                     prefix=prefix)
    params: dict[str, object] = {"batch": 1}
    if group is not None:
        params["consumerGroup"] = group
    path = queue if partition == "Default" else f"{queue}/partition/{partition}"
    for _ in range(n):
        popped = await pop_json(http, path, **params)
        assert popped is not None
        [m] = popped["messages"]
        r = await http.post("/api/v1/ack", json={
            "transactionId": m["transactionId"], "partitionId": m["partitionId"],
            "leaseId": m["leaseId"], "status": "dlq", "error": "poison",
            "consumerGroup": group})
        assert r.status_code == 200 and r.json()[0]["success"], r.text
    listed = await http.get("/api/v1/dlq", params={"queue": queue, "limit": 1000})
    found = [m for m in listed.json()["messages"] if m["transactionId"].startswith(prefix)]
    assert len(found) == n
    return found


async def test_replay_by_id_pushes_the_copy_again_and_removes_the_row(
        broker: BrokerProcess, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    [letter] = await dead_letters(http, queue_name, 1)
    r = await http.post(f"/api/v1/dlq/{letter['id']}/replay")  # no body
    body = r.json()
    assert r.status_code == 200, body
    assert body["success"] is True and body["result"] == "moved"
    assert (body["queue"], body["partition"], body["dlqId"]) == (
        queue_name, "Default", letter["id"])
    assert body["originalTransactionId"] == letter["transactionId"]
    assert body["replayedAs"]["status"] == "queued" and body["replayedAs"]["offset"] == 1
    assert body["dlqRowRemoved"] is True
    assert await db.fetchval("SELECT count(*) FROM queen.log_dlq WHERE id = $1",
                             int(letter["id"])) == 0
    popped = await pop_json(http, queue_name)
    assert popped is not None
    [m] = popped["messages"]
    assert m["data"] == {"n": 0} and m["transactionId"] == body["replayedAs"]["transaction_id"]
    # The row is gone: a second replay is a 404 naming the id.
    r = await http.post(f"/api/v1/dlq/{letter['id']}/replay")
    assert r.status_code == 404
    assert r.json() == {"success": False, "dlqId": letter["id"], "error": "Message not found"}


async def test_replay_by_id_to_another_queue_and_partition(
        http: httpx.AsyncClient, queue_name: str) -> None:
    [letter] = await dead_letters(http, queue_name, 1, group="g1")
    target = queue_name + "-fixed"
    r = await http.post(f"/api/v1/dlq/{letter['id']}/replay",
                        json={"queue": target, "partition": "repair"})
    body = r.json()
    assert r.status_code == 200, body
    assert (body["queue"], body["partition"], body["consumerGroup"]) == (target, "repair", "g1")
    assert body["replayedAs"]["queueName"] == target
    popped = await pop_json(http, f"{target}/partition/repair")
    assert popped is not None and popped["messages"][0]["data"] == {"n": 0}
    # Only the partition given: the dead letter's own queue.
    [other] = await dead_letters(http, queue_name, 1, group="g1", prefix="e")
    r = await http.post(f"/api/v1/dlq/{other['id']}/replay", json={"partition": "side"})
    assert (r.json()["queue"], r.json()["partition"]) == (queue_name, "side")


async def test_replay_by_id_refuses_bad_ids_and_bodies(http: httpx.AsyncClient) -> None:
    r = await http.post("/api/v1/dlq/999999999999/replay")
    assert r.status_code == 404 and r.json()["error"] == "Message not found"
    r = await http.post("/api/v1/dlq/abc/replay")
    assert r.status_code == 400 and "id" in r.json()["error"]
    r = await http.post("/api/v1/dlq/1/replay", json={"queue": 5})
    assert r.status_code == 400 and "queue" in r.json()["error"]


async def test_purge_deletes_a_queues_dead_letters_and_their_segment_copies(
        broker: BrokerProcess, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    await dead_letters(http, queue_name, 3, group="g1", prefix="a")
    await dead_letters(http, queue_name, 2, group="g2", prefix="b", partition="P2")
    other = queue_name + "-other"
    await dead_letters(http, other, 1, group="g1", prefix="c")
    r = await http.delete("/api/v1/dlq", params={"queue": queue_name, "consumerGroup": "g1"})
    assert r.status_code == 200
    assert r.json() == {"success": True, "deleted": 3, "queue": queue_name,
                        "consumerGroup": "g1"}
    client = Queen(broker.url)
    try:
        left = await client.queue(queue_name).dlq().limit(100).get()
    finally:
        await client.close()
    assert left["total"] == 2 and {m["consumerGroup"] for m in left["messages"]} == {"g2"}
    r = await http.delete("/api/v1/dlq", params={"queue": queue_name})
    assert r.json() == {"success": True, "deleted": 2, "queue": queue_name,
                        "consumerGroup": None}
    copies = await db.fetchval(
        "SELECT count(*) FROM queen.log_dlq_segments s JOIN queen.log_partitions p"
        " ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id"
        " WHERE q.name = $1", queue_name)
    assert copies == 0
    # The other queue's dead letter is untouched; nothing left to purge answers 0.
    assert (await http.get("/api/v1/dlq", params={"queue": other})).json()["total"] == 1
    r = await http.delete("/api/v1/dlq", params={"queue": queue_name})
    assert r.json()["deleted"] == 0
    r = await http.delete("/api/v1/dlq")
    assert r.status_code == 400 and r.json()["error"] == "queue is required"


async def test_a_replay_racing_a_purge_yields_each_dead_letter_once(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    letters = await dead_letters(http, queue_name, 6, group="g")
    replays = [http.post(f"/api/v1/dlq/{m['id']}/replay") for m in letters]
    purge = http.delete("/api/v1/dlq", params={"queue": queue_name})
    *answers, purged = await asyncio.gather(*replays, purge)
    moved = sum(1 for a in answers if a.status_code == 200)
    assert all(a.status_code in (200, 404) for a in answers)
    assert moved + purged.json()["deleted"] == 6  # each row replayed or deleted, never both
    assert await db.fetchval(
        "SELECT count(*) FROM queen.log_dlq d JOIN queen.log_partitions p"
        " ON p.id = d.partition_id JOIN queen.queues q ON q.id = p.queue_id"
        " WHERE q.name = $1", queue_name) == 0
    # replayed messages are new messages after the 6 originals
    r = await http.post("/api/v1/fetch", json={"entries": [{"queue": queue_name,
                                                            "offset": 6}]})
    assert len(r.json()["entries"][0]["records"]) == moved


# --- partitions/changed --------------------------------------------------------------------

async def test_changed_since_lists_written_partitions_with_a_safe_time(
        broker: BrokerProcess, http: httpx.AsyncClient, queue_name: str) -> None:
    for part in ("p1", "p2", "p3"):
        await push_items(http, queue_name, [1], partition=part, prefix=part)
    client = Queen(broker.url)
    try:
        everything = await client.queue(queue_name).changed_since()
        await push_items(http, queue_name, [2], partition="p2", prefix="again")
        since_safe = await client.queue(queue_name).changed_since(everything["safeTime"])
        nothing = await client.queue(queue_name + "-none").changed_since()
    finally:
        await client.close()
    names = [p["name"] for p in everything["partitions"]]
    assert names == ["p1", "p2", "p3"]  # creation order
    p1 = everything["partitions"][0]
    assert p1["lastOffset"] == 0 and p1["logStart"] == 0 and p1["lastWriteAt"].endswith("Z")
    assert int(p1["id"]) > 0
    assert [p["name"] for p in since_safe["partitions"]] == ["p2"]
    assert since_safe["partitions"][0]["lastOffset"] == 1
    assert datetime.fromisoformat(since_safe["safeTime"]) >= datetime.fromisoformat(
        everything["safeTime"])
    assert nothing == {"partitions": [], "safeTime": nothing["safeTime"]}


async def test_changed_pages_by_cursor_and_refuses_bad_entries(
        http: httpx.AsyncClient, queue_name: str) -> None:
    for part in ("a", "b", "c"):
        await push_items(http, queue_name, [1], partition=part, prefix=part)
    seen: list[str] = []
    after = None
    for _ in range(5):
        entry: dict[str, Any] = {"queue": queue_name, "limit": 2}
        if after:
            entry["after"] = after
        r = await http.post("/api/v1/partitions/changed", json={"entries": [entry]})
        assert r.status_code == 200, r.text
        [result] = r.json()["entries"]
        seen += [p["name"] for p in result["partitions"]]
        after = result.get("next")
        if not after:
            break
    assert seen == ["a", "b", "c"]
    r = await http.post("/api/v1/partitions/changed", json={"entries": [
        {"queue": queue_name, "since": "2999-01-01T00:00:00Z"}, {"queue": queue_name + "-x"}]})
    assert r.json()["entries"] == [{"partitions": []}, {"partitions": [],
                                                        "error": "UNKNOWN_TOPIC_OR_PARTITION"}]
    for bad, word in (({"entries": [{"queue": queue_name, "since": "soon"}]}, "since"),
                      ({"entries": [{"queue": queue_name, "after": "x"}]}, "after"),
                      ({"entries": [{"queue": queue_name, "limit": 0}]}, "limit"),
                      ({"entries": [{"queue": "q"}] * 1025}, "1025"),
                      ({}, "entries")):
        r = await http.post("/api/v1/partitions/changed", json=bad)
        assert r.status_code == 400 and word in r.json()["error"], (bad, r.text)


@pytest.mark.parametrize("node", ["first", "last"])
async def test_safe_time_is_no_later_than_a_transaction_still_open(
        http: httpx.AsyncClient, database_url: str, queue_name: str, node: str) -> None:
    """A write in flight may carry a time before its commit: safeTime must not pass the
    start of any transaction still open, or a caller resuming from it would miss that
    write. The transaction is opened on the first or the last server the broker's URL
    names: on Citus the coordinator or a worker (the log's writes run on the workers)."""
    await push_items(http, queue_name, [1])
    hosts = dsn_hosts(database_url)
    conn = await asyncpg.connect(only_host(database_url, hosts[0 if node == "first" else -1]))
    try:
        async with conn.transaction():
            started = await conn.fetchval("SELECT now()")
            await conn.execute("SELECT txid_current()")
            await asyncio.sleep(0.05)
            r = await http.post("/api/v1/partitions/changed", json={"entries": [
                {"queue": queue_name}]})
            safe = datetime.fromisoformat(r.json()["safeTime"])
    finally:
        await conn.close()
    assert safe <= started
    r = await http.post("/api/v1/partitions/changed", json={"entries": [{"queue": queue_name}]})
    assert datetime.fromisoformat(r.json()["safeTime"]) > started
