"""The analytics sampling pass (schema/queries/stats.sql, `stats_sample_*`) on one PostgreSQL
and on a Citus cluster (issue 35): the pass reads the log's distributed tables and writes the
coordinator's own stats tables, which Citus refuses to do in one statement.
"""

from __future__ import annotations

import uuid
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


async def test_a_sampling_pass_stores_the_traffic_since_the_previous_one(
        http: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    queue = "sampled-" + uuid.uuid4().hex[:8]
    await refresh(http)  # the baseline: the queue is created after it, so it counts from zero
    for partition in PARTITIONS:
        await push_items(http, queue, [1, 2, 3], partition=partition, prefix=partition)
    acked = 0
    for partition in PARTITIONS[:2]:
        popped = await pop_json(http, queue, partition=partition, batch=2)
        assert popped is not None
        r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [
            {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
             "leaseId": m["leaseId"], "status": "completed"} for m in popped["messages"]]})
        assert r.status_code == 200 and all(a["success"] for a in r.json()), r.text
        acked += len(popped["messages"])
    assert acked == 4
    passes = await db.fetchval("SELECT count(*) FROM queen.stats_samples WHERE queue_id = 0")
    await refresh(http)
    assert await db.fetchval(
        "SELECT count(*) FROM queen.stats_samples WHERE queue_id = 0") == passes + 1
    row = await db.fetchrow(
        "SELECT sum(pushed) AS pushed, sum(acked) AS acked, max(partitions) AS partitions,"
        "       max(depth) AS depth"
        "  FROM queen.stats_samples WHERE queue = $1", queue)
    assert row is not None
    assert dict(row) == {"pushed": 12, "acked": 4, "partitions": 4, "depth": 8}
    # The baseline moved: a pass without traffic counts nothing more.
    await refresh(http)
    again = await db.fetchval("SELECT sum(pushed) FROM queen.stats_samples WHERE queue = $1",
                              queue)
    assert again == 12
    series = await analytics(http, queue=queue)
    assert sum(b["pushed"] for b in series["buckets"]) == 12
    assert sum(b["acked"] for b in series["buckets"]) == 4


async def analytics(client: httpx.AsyncClient, **params: str) -> dict[str, Any]:
    r = await client.get("/api/v1/status/analytics", params={"interval": "minute", **params})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]
