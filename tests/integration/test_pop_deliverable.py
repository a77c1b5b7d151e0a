"""A pop answers 204 only when nothing is deliverable to its group.

Partitions that deliver nothing to the group once the claim looks at them (a first-contact
cursor seeded past their messages, messages too young for delayedProcessing, a cursor a
concurrent pop holds) do not spend the pop's `partitions` budget: it goes on to the other
candidates. Time-dependent options are driven by back-dating rows in SQL, never by sleeping.
"""

from __future__ import annotations

from datetime import UTC

import asyncpg
import httpx

from tests.support import configure, pop_json, push_items


async def test_new_groups_subscribing_from_an_instant_all_get_the_later_message(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    # The case that first showed it: five partitions written before T, one after.
    for p in ("P1", "P2", "P3", "P5", "P6"):
        await push_items(http, queue_name, [p], partition=p, prefix=p)
    instant = await db.fetchval("SELECT clock_timestamp()")
    await push_items(http, queue_name, ["P4"], partition="P4", prefix="P4")
    since = instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    answers = []
    for i in range(10):
        body = await pop_json(http, queue_name, consumerGroup=f"new-{i}", batch=10,
                              subscriptionFrom=since)
        answers.append(None if body is None else [m["data"] for m in body["messages"]])
    assert answers == [["P4"]] * 10


async def test_a_wildcard_pop_fills_its_partitions_past_ones_seeded_empty(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    for p in ("A", "B", "C", "D"):
        await push_items(http, queue_name, [f"{p}-old"], partition=p, prefix=p)
    instant = await db.fetchval("SELECT clock_timestamp()")
    for p in ("E", "F", "G"):
        await push_items(http, queue_name, [f"{p}-new"], partition=p, prefix=p)
    since = instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for i in range(5):
        body = await pop_json(http, queue_name, consumerGroup=f"w-{i}", batch=3, partitions=3,
                              subscriptionFrom=since)
        assert body is not None
        assert sorted(m["data"] for m in body["messages"]) == ["E-new", "F-new", "G-new"]
        assert body["partitionsClaimed"] == 3


async def test_partitions_too_young_for_delayed_processing_do_not_spend_the_budget(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, delayedProcessing=3600)
    names = [f"d{i}" for i in range(12)]
    for p in names:
        await push_items(http, queue_name, [p], partition=p, prefix=p)
    # Only the last partition's message is old enough.
    await db.execute(
        "UPDATE queen.log_segments s SET created_at = now() - interval '2 hours'"
        "  FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id"
        " WHERE s.partition_id = p.id AND q.name = $1 AND p.name = 'd11'", queue_name)
    for group in ("g1", "g2", "g3"):  # first contact: 12 candidates, one deliverable
        body = await pop_json(http, queue_name, batch=5, consumerGroup=group, autoAck=True)
        assert body is not None and [m["data"] for m in body["messages"]] == ["d11"]
    await push_items(http, queue_name, ["d11-b"], partition="d11", prefix="b")
    await db.execute(
        "UPDATE queen.log_segments s SET created_at = now() - interval '2 hours'"
        "  FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id"
        " WHERE s.partition_id = p.id AND q.name = $1 AND p.name = 'd11'", queue_name)
    # Existing cursors now: the eleven young partitions are still candidates of the scan.
    body = await pop_json(http, queue_name, batch=5, consumerGroup="g1", autoAck=True)
    assert body is not None and [m["data"] for m in body["messages"]] == ["d11-b"]
    assert await pop_json(http, queue_name, batch=5, consumerGroup="g1") is None


async def test_a_cursor_locked_by_a_concurrent_pop_is_passed_over_not_answered_empty(
        http: httpx.AsyncClient, db: asyncpg.Connection, database_url: str,
        queue_name: str) -> None:
    for p in ("L1", "L2"):
        await push_items(http, queue_name, [p], partition=p, prefix=p)
    assert await pop_json(http, queue_name, consumerGroup="g", partitions=2,
                          batch=2, autoAck=True) is not None  # both cursors exist
    for p in ("L1", "L2"):
        await push_items(http, queue_name, [p + "b"], partition=p, prefix=p + "b")
    holder = await asyncpg.connect(database_url)
    try:
        async with holder.transaction():
            # A claim in flight elsewhere holds L1's cursor (row lock, not yet a lease).
            await holder.execute(
                "SELECT 1 FROM queen.log_consumers c JOIN queen.log_partitions p"
                "  ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id"
                " WHERE q.name = $1 AND p.name = 'L1' AND c.consumer_group = 'g'"
                "   FOR UPDATE OF c", queue_name)
            body = await pop_json(http, queue_name, consumerGroup="g")
            assert body is not None and [m["data"] for m in body["messages"]] == ["L2b"]
    finally:
        await holder.close()
