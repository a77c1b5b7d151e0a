"""The write path through the official `queen-mq` 2.6.0 client: create, push, dedup, fetch,
delete. The client is what real users run, so its reading of our answers is the contract.
Every test runs in each of the client's wire modes (JSON, binary push plain and framed,
framed pop: `tests.client_modes`)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from queen import Queen

from tests.client_modes import CLIENT_MODES, official_client
from tests.support import BrokerProcess, queue_counts

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all


@pytest.fixture(params=list(CLIENT_MODES))
async def queen(broker: BrokerProcess, request: pytest.FixtureRequest) -> AsyncIterator[Queen]:
    # The async context closes the client (flushes buffers, closes its HTTP client and
    # removes the signal handlers it installed).
    async with official_client(broker.url, request.param) as client:
        yield client


async def test_create_sends_client_defaults_and_reads_back_effective_options(
        queen: Queen, queue_name: str) -> None:
    name = f"shop.{queue_name}"
    answer = await queen.queue(name).config(
        {"lease_time": 45, "retry_limit": 6, "dedup_window_seconds": 120}).create()
    assert answer["configured"] is True
    assert answer["queue"] == name
    assert (answer["namespace"], answer["task"]) == ("shop", queue_name)
    opts = answer["options"]
    assert (opts["leaseTime"], opts["retryLimit"], opts["dedupWindowSeconds"]) == (45, 6, 120)
    assert (opts["priority"], opts["maxSize"], opts["encryptionEnabled"]) == (0, 0, False)


@pytest.mark.citus  # the suite's smoke of this module on Citus
async def test_push_then_repush_of_the_same_transaction_id_answers_duplicate(
        queen: Queen, queue_name: str) -> None:
    await queen.queue(queue_name).create()
    first = await queen.queue(queue_name).push([
        {"transactionId": "order-1", "data": {"total": 10}},
        {"transactionId": "order-2", "data": {"total": 20}},
    ])
    assert [r["status"] for r in first] == ["queued", "queued"]
    assert [r["transaction_id"] for r in first] == ["order-1", "order-2"]

    duplicates: list[Any] = []
    successes: list[Any] = []

    async def on_duplicate(items: list[dict[str, Any]], error: Exception) -> None:
        duplicates.extend(items)

    async def on_success(items: list[dict[str, Any]]) -> None:
        successes.extend(items)

    again = await (queen.queue(queue_name)
                   .push([{"transactionId": "order-1", "data": {"total": 99}},
                          {"transactionId": "order-3", "data": {"total": 30}}])
                   .on_duplicate(on_duplicate).on_success(on_success))
    assert [r["status"] for r in again] == ["duplicate", "queued"]
    assert again[0]["message_id"] == first[0]["message_id"]
    assert [d["transactionId"] for d in duplicates] == ["order-1"]
    assert duplicates[0]["result"]["message_id"] == first[0]["message_id"]
    assert [s["transactionId"] for s in successes] == ["order-3"]

    read = await queen.queue(queue_name).fetch(["Default"])
    records = read["Default"]["records"]
    assert [(r["offset"], r["transactionId"], r["payload"]) for r in records] == [
        (0, "order-1", {"total": 10}), (1, "order-2", {"total": 20}),
        (2, "order-3", {"total": 30})]
    assert read["Default"]["highWatermark"] == 3


async def test_client_payload_shapes_and_partitions_are_stored_as_sent(
        queen: Queen, queue_name: str) -> None:
    await queen.queue(queue_name).partition("eu").push([
        {"data": None}, {"payload": [1, "two"]}, {"just": "the item"}, {"data": "ünïcødé"},
    ])
    read = await queen.queue(queue_name).fetch(["eu", "Default"])
    assert [r["payload"] for r in read["eu"]["records"]] == [
        None, [1, "two"], {"just": "the item"}, "ünïcødé"]
    assert read["Default"]["records"] == []


async def test_v4_trace_id_is_forwarded_and_echoed(queen: Queen, queue_name: str) -> None:
    trace = str(uuid.uuid4())
    (answer,) = await queen.queue(queue_name).push([{"data": 1, "traceId": trace}])
    assert answer["status"] == "queued" and answer["trace_id"] == trace


async def test_client_minted_transaction_ids_are_kept(queen: Queen, queue_name: str) -> None:
    answers = await queen.queue(queue_name).push([{"data": i} for i in range(3)])
    assert [a["status"] for a in answers] == ["queued"] * 3
    read = await queen.queue(queue_name).fetch("Default")
    assert [r["transactionId"] for r in read["Default"]["records"]] == \
        [a["transaction_id"] for a in answers]
    assert all(uuid.UUID(a["transaction_id"]) for a in answers)


async def test_bad_push_raises_in_the_client_with_the_broker_error_text(
        queen: Queen, queue_name: str) -> None:
    with pytest.raises(Exception, match="transactionId is longer than 65535 bytes"):
        await queen.queue(queue_name).push([{"transactionId": "t" * 70000, "data": 1}])


async def test_delete_removes_the_queue_and_a_second_delete_reports_it_gone(
        queen: Queen, db: asyncpg.Connection, queue_name: str) -> None:
    await queen.queue(queue_name).create()
    await queen.queue(queue_name).push([{"data": i} for i in range(5)])
    assert (await queue_counts(db, queue_name))["txn_index"] == 5

    answer = await queen.queue(queue_name).delete()
    assert answer == {"deleted": True, "queue": queue_name, "existed": True}
    assert await queue_counts(db, queue_name) == {
        "queues": 0, "partitions": 0, "segments": 0, "txn_index": 0}
    again = await queen.queue(queue_name).delete()
    assert again["existed"] is False and again["deleted"] is False

    # Delete-then-create is a clean slate: offsets restart at 0.
    await queen.queue(queue_name).create()
    await queen.queue(queue_name).push([{"data": "fresh"}])
    read = await queen.queue(queue_name).fetch(["Default"])
    assert [(r["offset"], r["payload"]) for r in read["Default"]["records"]] == [(0, "fresh")]
