"""A group that subscribes `new` (or from a timestamp) to a queue of many partitions: its
first pop answers at once, having claimed nothing. The ready set counted a partition without
the group's cursor as ready whatever the group's subscription (schema/queries/ready.sql), so
that pop claimed every partition of the queue, eight at a time, each claim creating the
cursor past the old messages and delivering nothing: 13 s for 20,000 partitions on a quiet
machine (41 s on a busy one), for a pop asked not to wait.

Without those needless cursors, a group's positions on partitions it has not read come from
its subscription (queen.group_positions): on Citus that seed was computed on the shards,
where its read of the segments was refused, and listing the consumer groups failed."""

from __future__ import annotations

import datetime as dt

import asyncpg
import httpx
import pytest

pytestmark = pytest.mark.citus

PARTITIONS = 300


async def _one_message_in_each(http: httpx.AsyncClient, queue: str) -> None:
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": f"p{n}", "payload": {"old": n}}
        for n in range(PARTITIONS)]})
    assert r.status_code == 201, r.text


async def _cursors(db: asyncpg.Connection, queue: str, group: str) -> int:
    return int(await db.fetchval(
        "SELECT count(*) FROM queen.log_consumers c"
        " JOIN queen.log_partitions p ON p.id = c.partition_id"
        " JOIN queen.queues q ON q.id = p.queue_id"
        " WHERE q.name = $1 AND c.consumer_group = $2", queue, group))


async def _pop(http: httpx.AsyncClient, queue: str, group: str,
               **subscription: str) -> list[dict[str, object]]:
    r = await http.get(f"/api/v1/pop/queue/{queue}", params={
        "consumerGroup": group, "batch": "10", "wait": "false", "autoAck": "true",
        **subscription})
    assert r.status_code in (200, 204), r.text
    return [] if r.status_code == 204 else list(r.json()["messages"])


async def test_a_new_group_s_first_pop_claims_none_of_the_old_partitions(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    queue = queue_name
    await _one_message_in_each(http, queue)
    assert await _pop(http, queue, "late", subscriptionMode="new") == []
    # Before: a cursor in every partition (each was claimed to find nothing).
    assert await _cursors(db, queue, "late") == 0
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": "p7", "payload": {"new": 1}}]})
    assert r.status_code == 201, r.text
    assert [m["data"] for m in await _pop(http, queue, "late")] == [{"new": 1}]
    assert await _pop(http, queue, "late") == []
    # A group from the start still gets every old message.
    got = []
    while batch := await _pop(http, queue, "early"):
        got.extend(batch)
    assert len(got) == PARTITIONS + 1


async def test_a_group_subscribed_from_a_timestamp_gets_only_what_came_after_it(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    queue = queue_name
    await _one_message_in_each(http, queue)
    since = dt.datetime.now(dt.UTC).isoformat()
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": "p3", "payload": {"after": 1}}]})
    assert r.status_code == 201, r.text
    got = await _pop(http, queue, "from", subscriptionFrom=since)
    assert [m["data"] for m in got] == [{"after": 1}]
    assert await _cursors(db, queue, "from") == 1  # p3's only


async def test_the_groups_list_a_new_group_s_lag_on_partitions_it_has_not_read(
        http: httpx.AsyncClient, queue_name: str) -> None:
    queue = queue_name
    await _one_message_in_each(http, queue)
    assert await _pop(http, queue, "lagging", subscriptionMode="new") == []
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": f"p{n}", "payload": {"new": n}} for n in (1, 2)]
        + [{"queue": queue, "partition": "fresh", "payload": {"new": 3}}]})
    assert r.status_code == 201, r.text
    r = await http.get("/api/v1/consumer-groups")
    assert r.status_code == 200, r.text  # before, on Citus: 503, database error XX000
    [mine] = [g for g in r.json() if g["name"] == "lagging" and g["queueName"] == queue]
    assert (mine["subscriptionMode"], mine["offsetLag"], mine["partitionsWithLag"]) == \
        ("new", 3, 3)
