"""Lag counts every partition a group reads, whether or not it has popped it yet (issue 25
point 2): a lane created after the group's last pop, or one its pops have not reached, waits
for it by its subscription rule (`all` from the first retained message, `new` / a timestamp
after the group's stored instant). Checked through the consumer-group routes, the `lag` and
`groups list` commands, the depth route (conflation), the Prometheus pop lag and the
analytics samples, each against what the group's next pop then delivers."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from tests.integration.test_cli import Cli
from tests.integration.test_observability import analytics, refresh, scrape, value
from tests.support import BrokerProcess, pop_json, push_items


async def ack_all(http: httpx.AsyncClient, popped: dict[str, Any], group: str | None) -> None:
    r = await http.post("/api/v1/ack/batch", json={"consumerGroup": group, "acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "leaseId": m["leaseId"], "status": "completed"} for m in popped["messages"]]})
    assert r.status_code == 200 and all(a["success"] for a in r.json()), r.text


async def summary(http: httpx.AsyncClient, group: str, queue: str) -> dict[str, Any]:
    r = await http.get("/api/v1/consumer-groups")
    assert r.status_code == 200, r.text
    [entry] = [g for g in r.json() if g["name"] == group and g["queueName"] == queue]
    return entry  # type: ignore[no-any-return]


async def positions(http: httpx.AsyncClient, group: str, queue: str) -> dict[str, Any]:
    r = await http.get(f"/api/v1/consumer-groups/{group}")
    assert r.status_code == 200, r.text
    return {p["partition"]: p for p in r.json().get(queue, {"partitions": []})["partitions"]}


async def test_a_lane_the_group_never_popped_counts_in_every_lag_view(
        broker: BrokerProcess, http: httpx.AsyncClient, queue_name: str) -> None:
    """The issue's Try-it: billing read `eu`; a message on the new lane `us` waits for it."""
    await push_items(http, queue_name, [{"id": 1}], partition="eu", prefix="eu")
    popped = await pop_json(http, queue_name, consumerGroup="billing", batch=10)
    assert popped is not None and [m["data"] for m in popped["messages"]] == [{"id": 1}]
    await ack_all(http, popped, "billing")
    await push_items(http, queue_name, [{"id": 10}], partition="us", prefix="us")

    listed = await summary(http, "billing", queue_name)
    assert (listed["offsetLag"], listed["partitionsWithLag"]) == (1, 1)
    assert listed["state"] == "Lagging"
    rows = await positions(http, "billing", queue_name)
    assert rows["eu"]["hasCursor"] and rows["eu"]["offsetLag"] == 0
    assert not rows["us"]["hasCursor"]
    assert (rows["us"]["offsetLag"], rows["us"]["committedOffset"]) == (1, -1)
    assert rows["us"]["workerId"] is None and rows["us"]["totalConsumed"] == 0
    r = await http.get("/api/v1/consumer-groups/lagging", params={"minLagSeconds": 0})
    assert r.status_code == 200, r.text
    assert [(e["partition_name"], e["offset_lag"]) for e in r.json()
            if e["consumer_group"] == "billing" and e["queue_name"] == queue_name] == [("us", 1)]

    cli = Cli(broker.url)
    lagging = cli.json("lag", "--group", "billing", "--queue", queue_name, "--lagging")
    assert [(r["partition"], r["offsetLag"]) for r in lagging] == [("us", 1)]
    shown = cli("lag", "--group", "billing", "--queue", queue_name, "--lagging")
    assert shown.exit_code == 0 and "no lagging partitions" not in shown.stdout
    assert "us" in shown.stdout
    listed_cli = [g for g in cli.json("groups", "list")
                  if g["name"] == "billing" and g["queueName"] == queue_name]
    assert [g["offsetLag"] for g in listed_cli] == [1]

    # What the lag announced is what the group's next pop delivers; then nothing lags.
    popped = await pop_json(http, queue_name, consumerGroup="billing", batch=10)
    assert popped is not None and [m["data"] for m in popped["messages"]] == [{"id": 10}]
    await ack_all(http, popped, "billing")
    assert (await summary(http, "billing", queue_name))["offsetLag"] == 0
    assert cli.json("lag", "--group", "billing", "--queue", queue_name, "--lagging") == []


async def test_new_and_timestamp_subscriptions_count_only_what_came_after_their_instant(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await push_items(http, queue_name, ["old"], partition="a", prefix="a")
    # `new`: the backlog of `a` is skipped; the group's instant is stored with its first pop.
    assert await pop_json(http, queue_name, consumerGroup="fresh",
                          subscriptionMode="new") is None
    await push_items(http, queue_name, ["b1", "b2"], partition="b", prefix="b")  # a new lane
    rows = await positions(http, "fresh", queue_name)
    assert (rows["a"]["offsetLag"], rows["b"]["offsetLag"]) == (0, 2)
    assert not rows["b"]["hasCursor"]
    popped = await pop_json(http, queue_name, consumerGroup="fresh", batch=10)
    assert popped is not None and [m["data"] for m in popped["messages"]] == ["b1", "b2"]
    await ack_all(http, popped, "fresh")

    # A timestamp between two writes of a lane the group has not read: only the later
    # write counts, and the group's next pop delivers exactly it.
    await push_items(http, queue_name, ["c-before-1", "c-before-2"], partition="c",
                     prefix="c")
    await asyncio.sleep(0.3)
    instant = datetime.now(UTC)
    await asyncio.sleep(0.3)
    await push_items(http, queue_name, ["c-after"], partition="c", prefix="c-late")
    r = await http.post("/api/v1/consumer-groups/fresh/subscription",
                        json={"subscriptionTimestamp": instant.isoformat()})
    assert r.status_code == 200, r.text
    rows = await positions(http, "fresh", queue_name)
    assert (rows["c"]["offsetLag"], rows["c"]["committedOffset"]) == (1, 1)
    listed = await summary(http, "fresh", queue_name)
    assert (listed["offsetLag"], listed["partitionsWithLag"]) == (1, 1)
    popped = await pop_json(http, queue_name, consumerGroup="fresh", batch=10)
    assert popped is not None and [m["data"] for m in popped["messages"]] == ["c-after"]
    await ack_all(http, popped, "fresh")
    assert await pop_json(http, queue_name, consumerGroup="fresh", batch=10) is None
    assert (await summary(http, "fresh", queue_name))["offsetLag"] == 0


async def test_a_conflating_group_and_the_depth_route_count_the_same(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await push_items(http, queue_name, ["x"], partition="a", prefix="a")
    popped = await pop_json(http, queue_name, consumerGroup="latest", conflation=True)
    assert popped is not None and popped["conflation"] is True
    await ack_all(http, popped, "latest")
    await push_items(http, queue_name, ["y1", "y2", "y3"], partition="b", prefix="b")
    r = await http.get(f"/api/v1/resources/queues/{queue_name}/depth",
                       params={"group": "latest"})
    assert r.status_code == 200, r.text
    depth = r.json()
    listed = await summary(http, "latest", queue_name)
    assert listed["conflation"] is True
    assert (listed["offsetLag"], listed["partitionsWithLag"]) == \
        (depth["pending"], depth["partitionsPending"]) == (3, 1)


@pytest.fixture(scope="module")
def own_broker(own_database_module: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(own_database_module, workers=1,
                       env={"METRICS_FLUSH_MS": "200"}) as proc:
        yield proc


@pytest.fixture(scope="module")
async def own_database_module(pg_server_url: str) -> str:
    from tests.support import create_database

    return await create_database(pg_server_url)


@pytest.fixture
async def own_http(own_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=own_broker.url, timeout=30) as client:
        yield client


async def test_prometheus_and_analytics_see_the_lane_nobody_popped(
        own_http: httpx.AsyncClient, own_database_module: str, queue_name: str) -> None:
    """Queue mode (no group) read `a`; `b` waits. Its own database: the sampling pass the
    analytics need writes baselines for every queue."""
    await push_items(own_http, queue_name, [1], partition="a", prefix="a")
    popped = await pop_json(own_http, queue_name, batch=10)
    assert popped is not None
    await ack_all(own_http, popped, None)
    await push_items(own_http, queue_name, [2, 3], partition="b", prefix="b")
    assert (await summary(own_http, "__QUEUE_MODE__", queue_name))["offsetLag"] == 2
    await asyncio.sleep(1.2)
    lag_ms = value(await scrape(own_http), "queen_queue_pop_lag_milliseconds",
                   queue=queue_name)
    assert lag_ms >= 1000
    await refresh(own_http)
    last = (await analytics(own_http, queue=queue_name))["buckets"][-1]
    assert last["depth"] == 2 and last["lagSeconds"] >= 1
    conn = await asyncpg.connect(own_database_module)
    try:  # the gauge is the age of b's first message, as the database measures it
        age_ms = await conn.fetchval(
            "SELECT extract(epoch FROM now() - s.created_at) * 1000 FROM queen.log_segments s"
            " JOIN queen.log_partitions p ON p.id = s.partition_id"
            " JOIN queen.queues q ON q.id = p.queue_id"
            " WHERE q.name = $1 AND p.name = 'b' ORDER BY s.base_offset LIMIT 1", queue_name)
    finally:
        await conn.close()
    assert lag_ms <= float(age_ms) + 1


async def test_the_binary_search_finds_the_offset_the_first_pop_seeds_at(
        db: asyncpg.Connection) -> None:
    """queen.offset_before (lag's seed for a timestamp subscription) against the backward
    scan queen.pop_claim seeds a new cursor with, on random partitions: segments of random
    sizes with non-decreasing stamps (ties included), retention cutting in anywhere, and
    every instant at, just before and just after each stamp. Rolled back: nothing stays."""
    rng = random.Random(25)
    tx = db.transaction()
    await tx.start()
    try:
        for layout in range(60):
            segments, offset, at = [], 0, datetime(2026, 1, 1, tzinfo=UTC)
            for _ in range(rng.randint(0, 12)):
                size = rng.randint(1, 5)
                at += timedelta(seconds=rng.choice((0, 0, 1, 2, 30)))
                segments.append((offset, offset + size - 1, at))
                offset += size
            last_offset = offset - 1
            log_start = rng.randint(0, max(offset, 0))
            kept = [s for s in segments if s[1] >= log_start]
            pid = await db.fetchval(
                "INSERT INTO queen.log_partitions (queue_id, name, last_offset, log_start,"
                " last_write_at) VALUES (-25, $1, $2, $3, $4) RETURNING id",
                f"layout-{layout}", last_offset, log_start,
                segments[-1][2] if segments else None)
            await db.executemany(
                "INSERT INTO queen.log_segments (partition_id, base_offset, last_offset,"
                " message_count, created_at, blob) VALUES ($1, $2, $3, $4, $5, '')",
                [(pid, b, e, e - b + 1, t) for b, e, t in kept])
            stamps = {t for _, _, t in segments} | {datetime(2025, 1, 1, tzinfo=UTC)}
            instants = sorted({t + timedelta(microseconds=d) for t in stamps
                               for d in (-1, 0, 1)})
            rows = await db.fetch(
                """SELECT i, queen.offset_before(p.id, p.log_start, p.last_offset,
                                                 p.last_write_at, i) AS searched,
                          greatest(p.log_start - 1, coalesce(
                              (SELECT s.last_offset FROM queen.log_segments s
                                WHERE s.partition_id = p.id AND s.created_at < i
                                ORDER BY s.base_offset DESC LIMIT 1),
                              p.log_start - 1)) AS scanned
                     FROM queen.log_partitions p, unnest($2::timestamptz[]) AS i
                    WHERE p.id = $1""", pid, instants)
            wrong = [(r["i"], r["searched"], r["scanned"]) for r in rows
                     if r["searched"] != r["scanned"]]
            assert wrong == [], (segments, log_start, wrong)
    finally:
        await tx.rollback()
