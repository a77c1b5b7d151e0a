"""Limits and write failures, on brokers of their own: small MAX_BODY_BYTES / MAX_PUSH_ITEMS,
a tiny coalescer backlog (429), a short lock timeout (per-item `failed`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import asyncpg
import httpx
import pytest

from tests.support import BrokerProcess, fetch_records, queue_counts, wait_for

MAX_BODY = 4096
MAX_ITEMS = 5


@pytest.fixture(scope="module")
def small_broker(database_url: str) -> Iterator[BrokerProcess]:
    env = {"MAX_BODY_BYTES": str(MAX_BODY), "MAX_PUSH_ITEMS": str(MAX_ITEMS)}
    with BrokerProcess(database_url, workers=1, env=env) as proc:
        yield proc


@pytest.fixture
async def small(small_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=small_broker.url, timeout=30) as client:
        yield client


async def _nothing_written(db: asyncpg.Connection, queue: str) -> None:
    assert (await queue_counts(db, queue))["queues"] == 0


async def test_body_over_the_limit_answers_413_and_writes_nothing(
        small: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    body = {"items": [{"queue": queue_name, "payload": "x" * MAX_BODY}]}
    r = await small.post("/api/v1/push", json=body)
    assert r.status_code == 413
    assert r.headers["content-type"] == "application/json"
    assert "over the limit of 4096 bytes" in r.json()["error"]
    await _nothing_written(db, queue_name)


async def test_chunked_body_over_the_limit_answers_413(
        small: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"items": [{"queue": "' + queue_name.encode() + b'", "payload": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}]}'

    r = await small.post("/api/v1/push", content=chunks(),
                         headers={"content-type": "application/json"})
    assert "content-length" not in r.request.headers  # really sent without a declared size
    assert r.status_code == 413
    assert "body is over the limit of 4096 bytes" in r.json()["error"]
    await _nothing_written(db, queue_name)


async def test_body_just_under_the_limit_is_accepted(
        small: httpx.AsyncClient, queue_name: str) -> None:
    head = {"items": [{"queue": queue_name, "payload": ""}]}
    overhead = len(httpx.Request("POST", "/", json=head).content)
    body = {"items": [{"queue": queue_name, "payload": "z" * (MAX_BODY - overhead)}]}
    assert len(httpx.Request("POST", "/", json=body).content) == MAX_BODY
    r = await small.post("/api/v1/push", json=body)
    assert r.status_code == 201, r.text
    assert r.json()[0]["status"] == "queued"


async def test_more_items_than_the_limit_answers_413_and_writes_nothing(
        small: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    items = [{"queue": queue_name, "payload": i} for i in range(MAX_ITEMS + 1)]
    r = await small.post("/api/v1/push", json={"items": items})
    assert r.status_code == 413
    assert r.json() == {"error": "6 items is over the limit of 5 per push"}
    await _nothing_written(db, queue_name)
    r = await small.post("/api/v1/push", json={"items": items[:MAX_ITEMS]})
    assert r.status_code == 201
    assert [e["status"] for e in r.json()] == ["queued"] * MAX_ITEMS


async def test_configure_and_fetch_bodies_obey_the_same_limit(
        small: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    r = await small.post("/api/v1/configure", json={"queue": queue_name, "pad": "p" * MAX_BODY})
    assert r.status_code == 413 and "over the limit" in r.json()["error"]
    await _nothing_written(db, queue_name)
    r = await small.post("/api/v1/fetch", json={"entries": [{"queue": queue_name}] * 200})
    assert r.status_code == 413 and "over the limit" in r.json()["error"]


@pytest.fixture(scope="module")
def tight_backlog_broker(database_url: str) -> Iterator[BrokerProcess]:
    # One process holding at most 2 messages waiting for a flush.
    env = {"COALESCER_MAX_PENDING_MESSAGES": "2"}
    with BrokerProcess(database_url, workers=1, env=env) as proc:
        yield proc


async def test_backlog_over_the_bound_answers_429_with_retry_after_and_writes_nothing_for_it(
        tight_backlog_broker: BrokerProcess, db: asyncpg.Connection, queue_name: str) -> None:
    async with httpx.AsyncClient(base_url=tight_backlog_broker.url, timeout=30) as client:
        async def push(txid: str) -> httpx.Response:
            return await client.post("/api/v1/push", json={"items": [
                {"queue": queue_name, "transactionId": txid, "payload": txid}]})

        assert (await push("warm")).status_code == 201  # partition exists and is cached
        # Hold the partition row lock, so the next flush stays in flight until we let go.
        locker = await asyncpg.connect(tight_backlog_broker.database_url)
        try:
            tx = locker.transaction()
            await tx.start()
            await locker.execute(
                """SELECT 1 FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                    WHERE q.name = $1 FOR UPDATE OF p""", queue_name)
            in_flight = asyncio.create_task(push("a"))

            async def flush_blocked() -> bool:
                return bool(await db.fetchval(
                    """SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
                        AND query LIKE '%queen.append_partitions(%'"""))

            await wait_for(flush_blocked)
            waiting = asyncio.create_task(push("b"))  # fills the backlog: 2 messages
            await asyncio.sleep(0.3)
            refused = await push("c")  # answered at once, while the lock is still held
            assert not in_flight.done() and not waiting.done()
            await tx.rollback()
        finally:
            await locker.close()
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.json() == {
            "error": "Too many messages are waiting to be written; retry shortly."}
        for task in (in_flight, waiting):
            r = await task
            assert r.status_code == 201 and r.json()[0]["status"] == "queued"
        # Once the backlog drained, the refused push goes through on retry.
        assert (await push("c")).json()[0]["status"] == "queued"
        entry = await fetch_records(client, queue_name)
    assert [(r["offset"], r["transactionId"]) for r in entry["records"]] == [
        (0, "warm"), (1, "a"), (2, "b"), (3, "c")]


@pytest.fixture(scope="module")
def short_lock_broker(database_url: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(database_url, workers=1, env={"DB_LOCK_TIMEOUT": "300"}) as proc:
        yield proc


async def test_a_partition_that_cannot_be_written_fails_only_its_items(
        short_lock_broker: BrokerProcess, queue_name: str) -> None:
    async with httpx.AsyncClient(base_url=short_lock_broker.url, timeout=30) as client:
        r = await client.post("/api/v1/push", json={"items": [
            {"queue": queue_name, "partition": p, "payload": 0} for p in ("stuck", "free")]})
        assert [e["status"] for e in r.json()] == ["queued", "queued"]
        locker = await asyncpg.connect(short_lock_broker.database_url)
        try:
            async with locker.transaction():
                await locker.execute(
                    """SELECT 1 FROM queen.log_partitions p JOIN queen.queues q
                         ON q.id = p.queue_id WHERE q.name = $1 AND p.name = 'stuck'
                        FOR UPDATE OF p""", queue_name)
                r = await client.post("/api/v1/push", json={"items": [
                    {"queue": queue_name, "partition": "stuck", "transactionId": "s1",
                     "payload": 1},
                    {"queue": queue_name, "partition": "free", "transactionId": "f1",
                     "payload": 1},
                    {"queue": queue_name, "partition": "stuck", "transactionId": "s2",
                     "payload": 2}]})
        finally:
            await locker.close()
        # Partial success: 201 with per-item verdicts, so the client resends only the failed.
        assert r.status_code == 201, r.text
        stuck1, free, stuck2 = r.json()
        assert free["status"] == "queued" and free["transaction_id"] == "f1"
        for entry, txid in ((stuck1, "s1"), (stuck2, "s2")):
            assert entry["status"] == "failed"
            assert entry["transaction_id"] == txid
            assert entry["queueName"] == queue_name
            assert "55P03" in entry["error"]  # lock_not_available
            assert entry["message_id"] == "00000000-0000-0000-0000-000000000000"
        stuck = await fetch_records(client, queue_name, "stuck")
        assert [rec["payload"] for rec in stuck["records"]] == [0]
        free_records = await fetch_records(client, queue_name, "free")
        assert [rec["payload"] for rec in free_records["records"]] == [0, 1]
        # Nothing of the failed items was stored, so resending them is safe and queues them.
        r = await client.post("/api/v1/push", json={"items": [
            {"queue": queue_name, "partition": "stuck", "transactionId": t, "payload": n}
            for n, t in ((1, "s1"), (2, "s2"))]})
        assert [e["status"] for e in r.json()] == ["queued", "queued"]


async def test_a_batch_ack_is_one_transaction_across_its_groups(
        short_lock_broker: BrokerProcess, db: asyncpg.Connection, queue_name: str) -> None:
    """g2's cursor is locked by someone else, so its part of the batch fails: g1's part,
    although fine, must not stay applied (the whole batch is one transaction, 503)."""
    async with httpx.AsyncClient(base_url=short_lock_broker.url, timeout=30) as client:
        r = await client.post("/api/v1/push", json={"items": [
            {"queue": queue_name, "payload": 0, "transactionId": "t0"}]})
        assert r.status_code == 201
        leases = {}
        for group in ("g1", "g2"):
            r = await client.get(f"/api/v1/pop/queue/{queue_name}",
                                 params={"consumerGroup": group})
            assert r.status_code == 200
            leases[group] = r.json()["messages"][0]
        locker = await asyncpg.connect(short_lock_broker.database_url)
        try:
            async with locker.transaction():
                await locker.execute(
                    """SELECT 1 FROM queen.log_consumers c JOIN queen.log_partitions p
                         ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id
                        WHERE q.name = $1 AND c.consumer_group = 'g2' FOR UPDATE OF c""",
                    queue_name)
                r = await client.post("/api/v1/ack/batch", json={"acknowledgments": [
                    {"transactionId": "t0", "partitionId": m["partitionId"],
                     "leaseId": m["leaseId"], "consumerGroup": g}
                    for g, m in leases.items()]})
        finally:
            await locker.close()
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"]
        committed = await db.fetch(
            """SELECT c.consumer_group, c.committed FROM queen.log_consumers c
                 JOIN queen.log_partitions p ON p.id = c.partition_id
                 JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1
                ORDER BY 1""", queue_name)
        assert [(row[0], row[1]) for row in committed] == [("g1", -1), ("g2", -1)]
        # Retried once the lock is gone, the same batch applies whole.
        r = await client.post("/api/v1/ack/batch", json={"acknowledgments": [
            {"transactionId": "t0", "partitionId": m["partitionId"], "leaseId": m["leaseId"],
             "consumerGroup": g} for g, m in leases.items()]})
        assert [e["success"] for e in r.json()] == [True, True]
