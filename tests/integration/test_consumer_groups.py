"""Consumer-group administration (§6.1) over HTTP and through the official client."""

from __future__ import annotations

import asyncpg
import httpx
import pytest
from queen import Queen

from tests.support import BrokerProcess

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all


async def push_n(http: httpx.AsyncClient, queue: str, partition: str, n: int) -> None:
    for i in range(n):  # one push per message: one segment each, for timestamp seeks
        r = await http.post("/api/v1/push", json={"items": [
            {"queue": queue, "partition": partition, "payload": {"i": i},
             "transactionId": f"{partition}-{i}"}]})
        assert r.status_code == 201 and r.json()[0]["status"] == "queued"


async def cursors(db: asyncpg.Connection, queue: str, group: str) -> dict[str, asyncpg.Record]:
    rows = await db.fetch(
        "SELECT p.name, c.* FROM queen.log_consumers c"
        " JOIN queen.log_partitions p ON p.id = c.partition_id"
        " JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND c.consumer_group = $2",
        queue, group)
    return {r["name"]: r for r in rows}


async def test_seek_to_end_creates_cursors_and_releases_leases(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_n(http, queue_name, "A", 3)
    await push_n(http, queue_name, "B", 2)
    r = await http.get(f"/api/v1/pop/queue/{queue_name}/partition/A",
                       params={"consumerGroup": "g", "batch": 2})
    assert len(r.json()["messages"]) == 2
    await db.execute("UPDATE queen.log_consumers SET retry_count = 2 WHERE consumer_group = 'g'")
    r = await http.post(f"/api/v1/consumer-groups/g/queues/{queue_name}/seek",
                        json={"toEnd": True})
    assert r.status_code == 200
    assert r.json() == {"success": True, "consumerGroup": "g", "queueName": queue_name,
                        "seekToEnd": True, "targetTimestamp": None, "partitionsUpdated": 2}
    got = await cursors(db, queue_name, "g")
    assert {k: v["committed"] for k, v in got.items()} == {"A": 2, "B": 1}
    assert all(v["worker_id"] is None and v["batch_end"] is None and v["retry_count"] == 0
               for v in got.values())
    r = await http.get(f"/api/v1/pop/queue/{queue_name}", params={"consumerGroup": "g"})
    assert r.status_code == 204


async def test_seek_by_timestamp_lands_before_the_first_message_at_or_after_it(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_n(http, queue_name, "Default", 4)
    # Offsets 0..3 were written 40, 30, 20, 10 minutes ago.
    await db.execute(
        # (Shifted in UTC: Citus pushes only immutable arithmetic on a column down.)
        "UPDATE queen.log_segments s SET created_at = ((now() AT TIME ZONE 'UTC')"
        " - make_interval(mins => 40 - 10 * s.base_offset::int)) AT TIME ZONE 'UTC'"
        "  FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id"
        " WHERE s.partition_id = p.id AND q.name = $1", queue_name)
    ts = await db.fetchval("SELECT to_char((now() - interval '25 minutes') AT TIME ZONE 'UTC',"
                           " 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
    r = await http.post(f"/api/v1/consumer-groups/g/queues/{queue_name}/seek",
                        json={"timestamp": ts})
    assert r.json()["partitionsUpdated"] == 1 and r.json()["targetTimestamp"].endswith("Z")
    assert (await cursors(db, queue_name, "g"))["Default"]["committed"] == 1
    r = await http.get(f"/api/v1/pop/queue/{queue_name}", params={"consumerGroup": "g"})
    assert [m["data"]["i"] for m in r.json()["messages"]] == [2]
    # Nothing that recent: the cursor goes to the last offset.
    r = await http.post(f"/api/v1/consumer-groups/g/queues/{queue_name}/partitions/Default/seek",
                        json={"timestamp": "2999-01-01T00:00:00Z"})
    assert r.json() == {**r.json(), "success": True, "partitionName": "Default",
                        "updated": True, "cursorMovedTo": 3}
    # Before everything: the whole retained log is unread again.
    r = await http.post(f"/api/v1/consumer-groups/g/queues/{queue_name}/partitions/Default/seek",
                        json={"timestamp": "2000-01-01T00:00:00Z"})
    assert r.json()["cursorMovedTo"] == -1


async def test_partition_seek_with_no_body_goes_to_the_end(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_n(http, queue_name, "P", 3)
    r = await http.post(f"/api/v1/consumer-groups/g/queues/{queue_name}/partitions/P/seek")
    assert r.status_code == 200 and r.json()["cursorMovedTo"] == 2


async def test_seek_errors(http: httpx.AsyncClient, queue_name: str) -> None:
    await push_n(http, queue_name, "P", 1)
    base = "/api/v1/consumer-groups/g/queues"
    r = await http.post(f"{base}/no-such-queue-{queue_name}/seek", json={"toEnd": True})
    assert r.status_code == 404 and "error" in r.json()
    r = await http.post(f"{base}/{queue_name}/partitions/nope/seek", json={"toEnd": True})
    assert r.status_code == 404 and "error" in r.json()
    for body in ({}, {"timestamp": "soon"}, {"toEnd": "yes"}, {"timestamp": 5}):
        r = await http.post(f"{base}/{queue_name}/seek", json=body)
        assert r.status_code == 400 and "error" in r.json(), body
    r = await http.post(f"{base}/{queue_name}/seek", content=b"{not json")
    assert r.status_code == 400


async def test_list_detail_lagging_and_delete(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_n(http, queue_name, "A", 3)
    await push_n(http, queue_name, "B", 1)
    group = "grp-" + queue_name
    for part in ("A", "B"):
        r = await http.post(
            f"/api/v1/consumer-groups/{group}/queues/{queue_name}/partitions/{part}/seek",
            json={"timestamp": "2000-01-01T00:00:00Z"})
        assert r.status_code == 200
    await db.execute("UPDATE queen.log_segments s SET created_at = now() - interval '2 hours'"
                     " FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id"
                     " WHERE s.partition_id = p.id AND q.name = $1", queue_name)
    r = await http.get("/api/v1/consumer-groups")
    [entry] = [e for e in r.json() if e["name"] == group]
    assert entry["queueName"] == queue_name and entry["topics"] == [queue_name]
    assert entry["partitionsWithLag"] == 2 and entry["offsetLag"] == 4
    assert entry["maxTimeLag"] >= 7000 and entry["state"] == "Dead"
    r = await http.get(f"/api/v1/consumer-groups/{group}")
    parts = {p["partition"]: p for p in r.json()[queue_name]["partitions"]}
    assert parts["A"]["offsetLag"] == 3 and parts["B"]["offsetLag"] == 1
    assert parts["A"]["leaseActive"] is False and parts["A"]["timeLagSeconds"] >= 7000
    r = await http.get("/api/v1/consumer-groups/lagging", params={"minLagSeconds": 3600})
    mine = sorted(e["partition_name"] for e in r.json() if e["consumer_group"] == group)
    assert mine == ["A", "B"]
    r = await http.get("/api/v1/consumer-groups/lagging", params={"minLagSeconds": 99999})
    assert not [e for e in r.json() if e["consumer_group"] == group]
    r = await http.get("/api/v1/consumer-groups/unknown-" + queue_name)
    assert r.status_code == 200 and r.json() == {}
    r = await http.delete(f"/api/v1/consumer-groups/{group}/queues/{queue_name}",
                          params={"deleteMetadata": "false"})
    assert r.json() == {**r.json(), "success": True, "queueName": queue_name,
                        "deletedPartitions": 2, "metadataDeleted": False}
    assert await cursors(db, queue_name, group) == {}
    r = await http.get("/api/v1/consumer-groups/lagging", params={"minLagSeconds": "-5"})
    assert r.status_code == 400


async def test_subscription_timestamp_and_delete_with_metadata_via_official_client(
        broker: BrokerProcess, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    await push_n(http, queue_name, "Default", 2)
    group = "sub-" + queue_name
    r = await http.get(f"/api/v1/pop/queue/{queue_name}",
                       params={"consumerGroup": group, "subscriptionMode": "new"})
    assert r.status_code == 204  # "new" skipped the backlog, and the choice was stored
    assert await db.fetchval("SELECT count(*) FROM queen.consumer_subscriptions"
                             " WHERE consumer_group = $1", group) == 1
    client = Queen(broker.url)
    try:
        res = await client.update_consumer_group_timestamp(group, "2001-02-03T04:05:06Z")
        assert res == {**res, "success": True, "consumerGroup": group, "rowsUpdated": 1}
        stored = await db.fetchrow("SELECT mode, subscription_from FROM"
                                   " queen.consumer_subscriptions WHERE consumer_group = $1",
                                   group)
        assert stored["subscription_from"].year == 2001 and stored["mode"] == "timestamp"
        listed = [e for e in await client.admin.list_consumer_groups() if e["name"] == group]
        assert listed[0]["subscriptionTimestamp"].startswith("2001-02-03T04:05:06")
        seek = await client.admin.seek_consumer_group(group, queue_name, {"toEnd": True})
        assert seek["partitionsUpdated"] == 1
        detail = await client.admin.get_consumer_group(group)
        assert detail[queue_name]["partitions"][0]["offsetLag"] == 0
        lagging = await client.admin.get_lagging_consumers(60)
        assert isinstance(lagging, list)
        res = await client.delete_consumer_group(group, delete_metadata=True)
        assert res == {**res, "success": True, "deletedPartitions": 1, "metadataDeleted": True}
        res = await client.admin.delete_consumer_group_for_queue(group, queue_name)
        assert res["deletedPartitions"] == 0
    finally:
        await client.close()
    assert await db.fetchval("SELECT count(*) FROM queen.consumer_subscriptions"
                             " WHERE consumer_group = $1", group) == 0
    r = await http.post(f"/api/v1/consumer-groups/{group}/subscription", json={})
    assert r.status_code == 400
    r = await http.post(f"/api/v1/consumer-groups/{group}/subscription",
                        json={"subscriptionTimestamp": "tomorrow"})
    assert r.status_code == 400
