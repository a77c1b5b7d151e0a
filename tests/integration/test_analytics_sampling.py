"""The analytics sampling pass (schema/queries/stats.sql, `stats_sample_*`) on one PostgreSQL
and on a Citus cluster (issue 35): the pass reads the log's distributed tables and writes the
coordinator's own stats tables, which Citus refuses to do in one statement.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support import pop_json, push_items

pytestmark = pytest.mark.citus

PARTITIONS = ("p0", "p1", "p2", "p3")  # hashed to shards on both workers


async def refresh(client: httpx.AsyncClient) -> None:
    r = await client.post("/api/v1/stats/refresh")
    assert r.status_code == 200 and r.json()["success"] is True, r.text


async def stored(db: asyncpg.Connection, queue: str) -> dict[str, int]:
    row = await db.fetchrow(
        "SELECT coalesce(sum(pushed), 0) AS pushed, coalesce(sum(delivered), 0) AS delivered,"
        "       coalesce(sum(acked), 0) AS acked, coalesce(sum(dead_lettered), 0) AS dead,"
        "       coalesce(max(partitions), 0) AS partitions"
        "  FROM queen.stats_samples WHERE queue = $1", queue)
    assert row is not None
    return dict(row)


async def test_a_sampling_pass_stores_the_traffic_since_the_previous_one(
        http: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    queue = "sampled-" + uuid.uuid4().hex[:8]
    await refresh(http)  # the baseline: the queue is created after it, so it counts from zero
    for partition in PARTITIONS:
        await push_items(http, queue, [1, 2, 3], partition=partition, prefix=partition)
    for partition, acks in zip(PARTITIONS, (["completed", "completed"], ["completed", "dlq"])):
        popped = await pop_json(http, queue, partition=partition, batch=2)
        assert popped is not None and len(popped["messages"]) == 2
        r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [
            {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
             "leaseId": m["leaseId"], "status": status,
             **({"error": "bad"} if status == "dlq" else {})}
            for m, status in zip(popped["messages"], acks)]})
        assert r.status_code == 200 and all(a["success"] for a in r.json()), r.text
    passes = await db.fetchval("SELECT count(*) FROM queen.stats_samples WHERE queue_id = 0")
    await refresh(http)
    assert await db.fetchval(
        "SELECT count(*) FROM queen.stats_samples WHERE queue_id = 0") == passes + 1
    # pushed and acked are read from the log; delivered from the counters each broker
    # process flushes (every second by default), so it may take another pass
    want = {"pushed": 12, "delivered": 4, "acked": 4, "dead": 1, "partitions": 4}
    deadline = time.monotonic() + 10
    while (figures := await stored(db, queue)) != want and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        await refresh(http)
    assert figures == want
    depth = await db.fetchval("SELECT depth FROM queen.stats_samples WHERE queue = $1"
                              " ORDER BY sampled_at DESC LIMIT 1", queue)
    assert depth == 8  # 3 + 3 + 1 + 1 left
    # The baseline moved: a pass without traffic counts nothing more.
    await refresh(http)
    assert await stored(db, queue) == want
    series = await analytics(http, queue=queue)
    assert sum(b["pushed"] for b in series["buckets"]) == 12
    assert sum(b["deadLettered"] for b in series["buckets"]) == 1


async def test_a_queue_stamped_before_the_previous_pass_but_unseen_by_it_counts_from_zero(
        http: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    """A queue whose creating transaction began before a pass and committed after that
    pass's snapshot is stamped (created_at, its transaction's start) before the pass, yet
    the pass did not see it: the next pass must still count its traffic from zero, not drop
    it for a history it thinks it missed. The state is made directly: the queue's stamp
    moved before the previous pass, which saw none of it."""
    queue = "unseen-" + uuid.uuid4().hex[:8]
    await refresh(http)  # not the first pass: what came before it is history, not a spike
    await asyncio.sleep(0.1)
    await refresh(http)
    await push_items(http, queue, [1, 2, 3])
    previous = await db.fetchval(
        "SELECT max(sampled_at) FROM queen.stats_samples WHERE queue_id = 0")
    await db.execute("UPDATE queen.queues SET created_at = $2 WHERE name = $1", queue,
                     previous - timedelta(milliseconds=10))
    await refresh(http)
    assert (await stored(db, queue))["pushed"] == 3


async def test_a_dead_letter_stamped_before_the_previous_pass_but_unseen_by_it_counts_once(
        http: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    """A dead letter whose transaction began before a pass and committed after that pass
    read the table: stamped before the pass, unseen by it. It is counted once, by a later
    pass (it was counted by none when each pass counted the stamps since the previous
    one). The state is made directly: the stamp moved before a pass that saw none of it."""
    queue = "late-dead-" + uuid.uuid4().hex[:8]
    await push_items(http, queue, [1])
    popped = await pop_json(http, queue, batch=1)
    assert popped is not None
    await refresh(http)  # a pass before the dead letter exists
    [m] = popped["messages"]
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [{
        "transactionId": m["transactionId"], "partitionId": m["partitionId"],
        "leaseId": m["leaseId"], "status": "dlq", "error": "bad"}]})
    assert r.status_code == 200 and [a["success"] for a in r.json()] == [True], r.text
    previous = await db.fetchval(
        "SELECT max(sampled_at) FROM queen.stats_samples WHERE queue_id = 0")
    assert await db.execute("UPDATE queen.log_dlq SET failed_at = $2 WHERE partition_id = $1",
                            int(m["partitionId"]), previous - timedelta(milliseconds=10)) \
        == "UPDATE 1"
    deadline = time.monotonic() + 15
    while (dead := (await stored(db, queue))["dead"]) == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        await refresh(http)
    assert dead == 1
    await asyncio.sleep(0.5)
    await refresh(http)
    assert (await stored(db, queue))["dead"] == 1  # once


async def analytics(client: httpx.AsyncClient, **params: str) -> dict[str, Any]:
    r = await client.get("/api/v1/status/analytics", params={"interval": "minute", **params})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_a_sampling_pass_forgets_the_counters_of_partitions_gone(
        http: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    gone = 2**62 - int(uuid.uuid4().int % 1000)  # no partition has this id
    await db.execute("INSERT INTO queen.stats_counters VALUES ($1, 'delivered', 3)", gone)
    await refresh(http)
    assert await db.fetchval(
        "SELECT count(*) FROM queen.stats_counters WHERE partition_id = $1", gone) == 0
