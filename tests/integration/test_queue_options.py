"""Every option configure accepts is applied or refused (docs/reference/queue-options.md):
retryDelay, maxWaitTimeSeconds, retentionEnabled, minPopWaitTime, maxSize and unknown keys,
through the HTTP API and the official client.

Time is moved by back-dating rows where the rule reads an age (segments' created_at), and
waited for only where the broker's own clock must pass (short delays, generous margins)."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import asyncpg
import httpx
import pytest
from queen import Queen

from core.storage.database import Database
from core.upkeep import maintenance
from tests.support import (
    BrokerProcess,
    announce_changed,
    configure,
    cursor_row,
    pop_json,
    push_items,
)

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all


async def ack(http: httpx.AsyncClient, message: dict[str, Any], status: str,
              group: str | None = None) -> dict[str, Any]:
    r = await http.post("/api/v1/ack", json={
        "transactionId": message["transactionId"], "partitionId": message["partitionId"],
        "leaseId": message["leaseId"], "status": status, "consumerGroup": group,
        "error": "boom"})
    item: dict[str, Any] = r.json()[0]
    assert item["success"] is True, item
    return item


async def age_segments(db: asyncpg.Connection, queue: str, seconds: int) -> None:
    """Make every stored message of the queue `seconds` older."""
    await db.execute(  # (shifted in UTC: Citus pushes only immutable arithmetic on a column down)
        """UPDATE queen.log_segments s
              SET created_at = ((s.created_at AT TIME ZONE 'UTC') - make_interval(secs => $2))
                               AT TIME ZONE 'UTC'
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
            WHERE s.partition_id = p.id AND q.name = $1""", queue, seconds)
    await announce_changed(db, queue)  # the brokers expect those messages' times as stored


# --- retryDelay -----------------------------------------------------------------------------

@pytest.mark.parametrize("status", ["failed", "retry"])
async def test_a_failed_or_retried_span_is_claimable_only_after_retry_delay(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, status: str) -> None:
    await configure(http, queue_name, retryDelay=2000, retryLimit=5)
    await push_items(http, queue_name, ["poison", "next"])
    body = await pop_json(http, queue_name, batch=2)
    assert body is not None
    released = time.monotonic()
    item = await ack(http, body["messages"][0], status)
    assert (item["leaseReleased"], item["dlq"]) == (True, False)
    row = await cursor_row(db, queue_name)
    assert row is not None and row["not_before"] is not None
    assert await pop_json(http, queue_name, batch=2) is None  # not yet: it would spin
    while (again := await pop_json(http, queue_name, batch=2)) is None:
        assert time.monotonic() - released < 10
        await asyncio.sleep(0.1)
    assert time.monotonic() - released >= 1.9
    assert [m["data"] for m in again["messages"]] == ["poison", "next"]
    assert (await cursor_row(db, queue_name))["not_before"] is None  # type: ignore[index]


async def test_dead_lettering_does_not_delay_the_next_message(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await configure(http, queue_name, retryDelay=60000, retryLimit=0)
    await push_items(http, queue_name, ["poison", "next"])
    body = await pop_json(http, queue_name)
    assert body is not None
    assert (await ack(http, body["messages"][0], "failed"))["dlq"] is True
    after = await pop_json(http, queue_name)
    assert after is not None and [m["data"] for m in after["messages"]] == ["next"]


async def test_a_parked_long_poll_gets_the_failed_span_after_the_delay_not_before(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await configure(http, queue_name, retryDelay=1200)
    await push_items(http, queue_name, ["work"])
    held = await pop_json(http, queue_name, consumerGroup="g")
    assert held is not None
    async with httpx.AsyncClient(base_url=str(http.base_url), timeout=30) as other:
        parked = asyncio.create_task(other.get(
            f"/api/v1/pop/queue/{queue_name}",
            params={"wait": "true", "timeout": 8000, "consumerGroup": "g"}))
        await asyncio.sleep(0.3)
        await ack(http, held["messages"][0], "failed", group="g")
        released = time.monotonic()
        answer = await asyncio.wait_for(parked, 12)
    waited = time.monotonic() - released
    assert answer.status_code == 200 and answer.json()["messages"][0]["data"] == "work"
    # Not before the delay; found by a backoff re-check (at most 1 s apart) after it, well
    # before the long poll's own 8 s deadline (margin for a loaded machine).
    assert 1.1 <= waited < 6.0, waited


async def test_seek_clears_the_retry_delay(http: httpx.AsyncClient, db: asyncpg.Connection,
                                           queue_name: str) -> None:
    await configure(http, queue_name, retryDelay=60000)
    await push_items(http, queue_name, ["a"])
    body = await pop_json(http, queue_name, consumerGroup="g")
    assert body is not None
    await ack(http, body["messages"][0], "failed", group="g")
    assert await pop_json(http, queue_name, consumerGroup="g") is None
    r = await http.post(f"/api/v1/consumer-groups/g/queues/{queue_name}/seek",
                        json={"timestamp": "2000-01-01T00:00:00Z"})
    assert r.status_code == 200
    again = await pop_json(http, queue_name, consumerGroup="g")
    assert again is not None and [m["data"] for m in again["messages"]] == ["a"]


async def test_official_client_poison_message_is_redelivered_at_the_retry_delay_pace(
        broker: BrokerProcess, queue_name: str) -> None:
    deliveries: list[float] = []
    done = asyncio.Event()

    async def handler(message: dict[str, Any]) -> None:
        deliveries.append(time.monotonic())
        if len(deliveries) >= 3:
            done.set()
        raise RuntimeError("poison")

    async with Queen(broker.url) as client:
        answer = await client.queue(queue_name).config(
            {"retry_delay": 700, "retry_limit": 10}).create()
        assert answer["options"]["retryDelay"] == 700
        await client.queue(queue_name).push([{"data": {"bad": True}}])
        await asyncio.wait_for(client.queue(queue_name).batch(1).timeout_millis(500)
                               .consume(handler, signal=done), 30)
    gaps = [b - a for a, b in itertools.pairwise(deliveries)]
    assert len(gaps) >= 2 and min(gaps) >= 0.6, gaps


# --- maxWaitTimeSeconds ---------------------------------------------------------------------

async def test_messages_older_than_max_wait_are_skipped_and_counted_as_evicted(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, maxWaitTimeSeconds=60)
    await push_items(http, queue_name, ["stale0", "stale1", "stale2"], prefix="old")
    await age_segments(db, queue_name, 120)
    await push_items(http, queue_name, ["fresh"], prefix="new")
    body = await pop_json(http, queue_name, batch=10, consumerGroup="g1")
    assert body is not None and [m["data"] for m in body["messages"]] == ["fresh"]
    row = await cursor_row(db, queue_name, "g1")
    assert row is not None and (row["committed"], row["evicted"]) == (2, 3)
    detail = (await http.get("/api/v1/consumer-groups/g1")).json()
    assert detail[queue_name]["partitions"][0]["evicted"] == 3
    # Each group evicts on its own cursor; with nothing fresh left, nothing is delivered
    # but the cursor still moves past the stale messages.
    await age_segments(db, queue_name, 120)
    assert await pop_json(http, queue_name, batch=10, consumerGroup="g2") is None
    row = await cursor_row(db, queue_name, "g2")
    assert row is not None and (row["committed"], row["evicted"]) == (3, 4)


async def test_without_max_wait_old_messages_are_delivered(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["old"])
    await age_segments(db, queue_name, 10 ** 6)
    body = await pop_json(http, queue_name)
    assert body is not None and [m["data"] for m in body["messages"]] == ["old"]


async def test_a_leased_batch_is_not_evicted_under_its_holder(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, maxWaitTimeSeconds=60, retryDelay=0)
    await push_items(http, queue_name, ["m0", "m1"])
    body = await pop_json(http, queue_name, batch=2)
    assert body is not None
    await age_segments(db, queue_name, 120)
    # The holder acks the first: it still counts, the cursor moves by the ack alone.
    first = await ack(http, body["messages"][0], "completed")
    assert first["leaseReleased"] is False
    assert (await cursor_row(db, queue_name))["evicted"] == 0  # type: ignore[index]
    # Its failure releases the rest, which is now too old for the next claim.
    await ack(http, body["messages"][1], "failed")
    assert await pop_json(http, queue_name, batch=2) is None
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["evicted"]) == (1, 1)


# --- retentionEnabled -----------------------------------------------------------------------

async def test_retention_runs_only_when_enabled_and_the_seconds_are_kept(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    answer = await configure(http, queue_name, retentionSeconds=60)
    assert (answer["options"]["retentionSeconds"], answer["options"]["retentionEnabled"]) \
        == (60, False)
    await push_items(http, queue_name, ["a", "b"])
    await age_segments(db, queue_name, 3600)

    async def log_start() -> int:
        return int(await db.fetchval(
            """SELECT p.log_start FROM queen.log_partitions p JOIN queen.queues q
                 ON q.id = p.queue_id WHERE q.name = $1""", queue_name))

    await maintenance.run_pass(core_db, retention=True, segment_batch=100)
    assert await log_start() == 0
    assert await pop_json(http, queue_name, autoAck=True, consumerGroup="peek") is not None
    answer = await configure(http, queue_name, retentionEnabled=True)
    assert answer["options"]["retentionSeconds"] == 60  # kept while the switch was off
    await maintenance.run_pass(core_db, retention=True, segment_batch=100)
    assert await log_start() == 2


# --- minPopWaitTime -------------------------------------------------------------------------

async def test_an_under_full_span_is_held_until_its_oldest_message_waited_min_pop_wait(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, minPopWaitTime=60000)
    await push_items(http, queue_name, ["a"], prefix="x")
    assert await pop_json(http, queue_name, batch=3) is None  # 1 of 3: held
    await push_items(http, queue_name, ["b", "c"], prefix="y")
    full = await pop_json(http, queue_name, batch=3, autoAck=True)
    assert full is not None and [m["data"] for m in full["messages"]] == ["a", "b", "c"]
    await push_items(http, queue_name, ["d"], prefix="z")
    assert await pop_json(http, queue_name, batch=3) is None
    await age_segments(db, queue_name, 61)  # the head has now waited long enough
    late = await pop_json(http, queue_name, batch=3)
    assert late is not None and [m["data"] for m in late["messages"]] == ["d"]


async def test_a_long_poll_answers_an_under_full_batch_after_min_pop_wait(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await configure(http, queue_name, minPopWaitTime=1000)
    started = time.monotonic()
    await push_items(http, queue_name, ["only"])
    r = await http.get(f"/api/v1/pop/queue/{queue_name}",
                       params={"wait": "true", "timeout": 8000, "batch": 10})
    waited = time.monotonic() - started
    assert r.status_code == 200 and [m["data"] for m in r.json()["messages"]] == ["only"]
    assert 0.9 <= waited < 6.0, waited  # held, then found well before the 8 s deadline


# --- unknown keys (maxSize: test_max_size.py) ---------------------------------------------------------------

@pytest.mark.parametrize("body", [
    {"options": {"leaseTime": 10, "retryDelayMs": 5}},
    {"leaseTime": 10, "retryDelayMs": 5},
])
async def test_an_unknown_option_key_answers_400_naming_it(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str,
        body: dict[str, Any]) -> None:
    r = await http.post("/api/v1/configure", json={"queue": queue_name, **body})
    assert r.status_code == 400
    assert r.json()["error"].startswith("unknown option retryDelayMs; the options are: ")
    assert await db.fetchval("SELECT count(*) FROM queen.queues WHERE name = $1",
                             queue_name) == 0


async def test_official_client_create_with_defaults_works_and_a_typo_is_refused(
        broker: BrokerProcess, queue_name: str) -> None:
    async with Queen(broker.url) as client:
        created = await client.queue(queue_name).create()  # its QUEUE_DEFAULTS, maxSize 0
        assert created["configured"] is True and created["options"]["maxSize"] == 0
        configured = await client.queue(queue_name).config(
            {"max_wait_time_seconds": 30, "min_pop_wait_time": 50,
             "retention_enabled": True, "retention_seconds": 600}).create()
        opts = configured["options"]
        assert (opts["maxWaitTimeSeconds"], opts["minPopWaitTime"], opts["retentionEnabled"],
                opts["retentionSeconds"]) == (30, 50, True, 600)
        with pytest.raises(Exception, match="unknown option leaseTim"):
            await client.queue(queue_name).config({"lease_tim": 5}).create()
        sized = await client.queue(queue_name).config({"max_size": 10}).create()
        assert sized["options"]["maxSize"] == 10  # enforced: tests/integration/test_max_size.py
