"""Deterministic races of docs/architecture/reliability.md that tests/integration does not already cover.

Already covered elsewhere (grep before adding): 20 concurrent pushes of one transactionId
(test_push_concurrency), concurrent first pops of one fresh (partition, group) (test_invariants),
gap-free offsets with monotone created_at under concurrent pushes (test_push_concurrency),
two reapers at once (test_reaper), dedup-window edges ±2 s and pruning (test_dedup,
test_reaper). Here: an ack racing its lease's expiry, in both orders and under a row lock
that fixes the order; concurrent pops of an expired lease; a dedup-window edge under
concurrency. Time moves by back-dating rows in SQL, never by sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from core.storage.database import Database
from core.upkeep import maintenance
from tests.support import (
    BrokerProcess,
    announce_changed,
    configure,
    cursor_row,
    expire_leases_of,
    fetch_records,
    pop_json,
    push_items,
    wait_for,
)

LEASE = 60


@pytest.fixture
async def wide(broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    """One connection per concurrent request, so both web workers take part."""
    limits = httpx.Limits(max_connections=40, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=broker.url, timeout=30, limits=limits) as client:
        yield client


def acks(body: dict[str, Any], lease: str | None) -> dict[str, Any]:
    return {"consumerGroup": body["consumerGroup"], "acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "status": "completed", **({"leaseId": lease} if lease else {})}
        for m in body["messages"]]}


async def _lock_waiters(db: asyncpg.Connection) -> int:
    return int(await db.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND datname = current_database()"))


async def test_an_ack_waiting_on_its_cursor_while_the_lease_expires_is_refused(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        database_url: str, queue_name: str) -> None:
    await configure(http, queue_name, leaseTime=LEASE)
    await push_items(http, queue_name, ["a", "b", "c"])
    first = await pop_json(http, queue_name, batch=3, consumerGroup="g")
    assert first is not None
    holder = await asyncpg.connect(database_url)
    try:
        # Hold the cursor row: the ack (FOR UPDATE) queues behind us, the reaper (SKIP
        # LOCKED) passes by; then the lease expires while the ack is still waiting.
        async with holder.transaction():
            await holder.execute(
                "SELECT 1 FROM queen.log_consumers WHERE worker_id = $1 FOR UPDATE",
                first["leaseId"])
            ack = asyncio.create_task(http.post("/api/v1/ack/batch",
                                                json=acks(first, first["leaseId"])))

            async def ack_is_waiting() -> bool:
                return await _lock_waiters(db) >= 1
            await wait_for(ack_is_waiting, timeout=10)
            await maintenance.expire_leases(core_db)
            await holder.execute(
                "UPDATE queen.log_consumers SET lease_expires_at = now() - interval '1 second'"
                " WHERE worker_id = $1", first["leaseId"])
        r = await ack
    finally:
        await holder.close()
    await announce_changed(db, queue_name)  # as the reaper announces what it releases
    assert [(e["success"], e["error"]) for e in r.json()] == [
        (False, "invalid or expired lease")] * 3
    row = await cursor_row(db, queue_name, "g")
    assert row is not None and row["committed"] == -1  # the refused ack moved nothing
    again = await pop_json(http, queue_name, batch=3, consumerGroup="g")
    assert again is not None and again["leaseId"] != first["leaseId"]
    assert [m["data"] for m in again["messages"]] == ["a", "b", "c"]


async def test_an_ack_on_a_live_lease_wins_every_race_against_the_reaper_and_other_pops(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    await configure(http, queue_name, leaseTime=LEASE)
    for round_ in range(10):
        await push_items(http, queue_name, [round_], prefix=f"r{round_}-")
        body = await pop_json(http, queue_name, consumerGroup="g")
        assert body is not None and [m["data"] for m in body["messages"]] == [round_]
        # The lease is live: whatever order the three meet the row in, the ack wins, the
        # reaper releases nothing of it, and no pop gets the span back.
        r, _released, other = await asyncio.gather(
            http.post("/api/v1/ack/batch", json=acks(body, body["leaseId"])),
            maintenance.expire_leases(core_db),
            pop_json(http, queue_name, consumerGroup="g"))
        assert r.json()[0]["success"] is True and r.json()[0]["leaseReleased"] is True
        assert other is None
        row = await cursor_row(db, queue_name, "g")
        assert row is not None and row["committed"] == round_ and row["worker_id"] is None


async def test_an_expired_lease_loses_every_race_against_a_pop_and_the_reaper(
        http: httpx.AsyncClient, wide: httpx.AsyncClient, db: asyncpg.Connection,
        core_db: Database, queue_name: str) -> None:
    await configure(http, queue_name, leaseTime=LEASE)
    await push_items(http, queue_name, list(range(10)))
    for round_ in range(8):
        body = await pop_json(http, queue_name, batch=10, consumerGroup="g")
        assert body is not None and [m["data"] for m in body["messages"]] == list(range(10))
        assert await expire_leases_of(db, queue_name) == 1
        r, _released, *pops = await asyncio.gather(
            wide.post("/api/v1/ack/batch", json=acks(body, body["leaseId"])),
            maintenance.expire_leases(core_db),
            *(pop_json(wide, queue_name, batch=10, consumerGroup="g") for _ in range(10)))
        assert {e["error"] for e in r.json()} == {"invalid or expired lease"}, round_
        winners = [p for p in pops if p is not None]
        assert len(winners) <= 1, round_  # never two holders of one span
        row = await cursor_row(db, queue_name, "g")
        assert row is not None and row["committed"] == -1
        if winners:  # hand the span back for the next round
            assert [m["data"] for m in winners[0]["messages"]] == list(range(10))
            await expire_leases_of(db, queue_name)
        await maintenance.expire_leases(core_db)
        await announce_changed(db, queue_name)  # as the reaper announces what it releases


async def test_twenty_concurrent_pops_of_an_expired_span_claim_it_exactly_once(
        http: httpx.AsyncClient, wide: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    await configure(http, queue_name, leaseTime=LEASE)
    await push_items(http, queue_name, ["x", "y"])
    first = await pop_json(http, queue_name, batch=5, consumerGroup="g")
    assert first is not None
    await expire_leases_of(db, queue_name)
    answers = await asyncio.gather(*(pop_json(wide, queue_name, batch=5, consumerGroup="g")
                                     for _ in range(20)))
    winners = [a for a in answers if a is not None]
    assert len(winners) == 1
    assert [m["data"] for m in winners[0]["messages"]] == ["x", "y"]
    row = await cursor_row(db, queue_name, "g")
    assert row is not None and row["worker_id"] == winners[0]["leaseId"] and row["lease_live"]


async def test_concurrent_repeats_of_an_id_just_outside_its_window_store_one_new_copy(
        http: httpx.AsyncClient, wide: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    window = 60
    await configure(http, queue_name, dedupWindowSeconds=window)
    await push_items(http, queue_name, ["old"], prefix="same")
    await db.execute(
        """UPDATE queen.log_txn_index i SET created_at = now() - make_interval(secs => $2)
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
            WHERE i.partition_id = p.id AND q.name = $1""", queue_name, window + 0.5)
    answers = await asyncio.gather(*(wide.post("/api/v1/push", json={"items": [
        {"queue": queue_name, "transactionId": "same0", "payload": n}]}) for n in range(20)))
    entries = [a.json()[0] for a in answers]
    queued = [e for e in entries if e["status"] == "queued"]
    assert len(queued) == 1, [e["status"] for e in entries]
    assert all(e["message_id"] == queued[0]["message_id"] for e in entries)
    records = (await fetch_records(http, queue_name))["records"]
    assert [(r["offset"], r["transactionId"]) for r in records] == [(0, "same0"), (1, "same0")]
    assert records[0]["payload"] == "old"
