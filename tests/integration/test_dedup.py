"""Windowed deduplication per partition (wire-protocol §4.1). Time is moved by back-dating
`queen.log_txn_index.created_at` in SQL, never by sleeping."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support import BrokerProcess, fetch_records

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all

WINDOW = 60


async def _push(http: httpx.AsyncClient, *items: dict[str, Any]) -> list[dict[str, Any]]:
    r = await http.post("/api/v1/push", json={"items": list(items)})
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


async def _configure(http: httpx.AsyncClient, queue: str, **opts: Any) -> dict[str, Any]:
    r = await http.post("/api/v1/configure", json={"queue": queue, "options": opts})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def _age_index(db: asyncpg.Connection, queue: str, seconds: float) -> int:
    """Pretend the queue's stored transactionIds were written `seconds` earlier."""
    result = await db.execute(
        # (Shifted in UTC: Citus pushes only immutable arithmetic on a column down.)
        """UPDATE queen.log_txn_index i
              SET created_at = ((i.created_at AT TIME ZONE 'UTC') - make_interval(secs => $2))
                               AT TIME ZONE 'UTC'
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
            WHERE i.partition_id = p.id AND q.name = $1""", queue, seconds)
    return int(result.split()[-1])


def _item(queue: str, txid: str, payload: Any = None, partition: str = "Default"
          ) -> dict[str, Any]:
    return {"queue": queue, "partition": partition, "transactionId": txid, "payload": payload}


async def test_repeat_inside_the_window_is_a_duplicate_carrying_the_stored_message_id(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await _configure(http, queue_name, dedupWindowSeconds=WINDOW)
    (first,) = await _push(http, _item(queue_name, "order-1", {"v": 1}))
    assert first["status"] == "queued"
    assert await _age_index(db, queue_name, WINDOW - 2) == 1
    (again,) = await _push(http, _item(queue_name, "order-1", {"v": 2}))
    assert again["status"] == "duplicate"
    assert again["message_id"] == first["message_id"]
    assert again["transaction_id"] == "order-1"
    assert "partition_id" not in again
    entry = await fetch_records(http, queue_name)
    assert [(r["offset"], r["payload"]) for r in entry["records"]] == [(0, {"v": 1})]


async def test_repeat_outside_the_window_is_a_new_message(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await _configure(http, queue_name, dedupWindowSeconds=WINDOW)
    (first,) = await _push(http, _item(queue_name, "order-1", {"v": 1}))
    await _age_index(db, queue_name, WINDOW + 2)
    (again,) = await _push(http, _item(queue_name, "order-1", {"v": 2}))
    assert again["status"] == "queued"
    assert again["message_id"] != first["message_id"]
    entry = await fetch_records(http, queue_name)
    assert [(r["offset"], r["transactionId"], r["payload"]) for r in entry["records"]] == [
        (0, "order-1", {"v": 1}), (1, "order-1", {"v": 2})]
    # The newest copy now guards the window again.
    (third,) = await _push(http, _item(queue_name, "order-1", {"v": 3}))
    assert third["status"] == "duplicate"
    assert third["message_id"] == again["message_id"]


async def test_default_window_is_an_hour(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    (first,) = await _push(http, _item(queue_name, "t"))
    await _age_index(db, queue_name, 3600 - 5)
    assert (await _push(http, _item(queue_name, "t")))[0]["status"] == "duplicate"
    await _age_index(db, queue_name, 10)
    (later,) = await _push(http, _item(queue_name, "t"))
    assert later["status"] == "queued" and later["message_id"] != first["message_id"]


async def test_same_transaction_id_in_another_partition_is_queued(
        http: httpx.AsyncClient, queue_name: str) -> None:
    (a,) = await _push(http, _item(queue_name, "shared", "A", partition="pa"))
    (b,) = await _push(http, _item(queue_name, "shared", "B", partition="pb"))
    assert a["status"] == b["status"] == "queued"
    assert a["message_id"] != b["message_id"]
    assert a["partition_id"] != b["partition_id"]
    assert (await fetch_records(http, queue_name, "pa"))["records"][0]["payload"] == "A"
    assert (await fetch_records(http, queue_name, "pb"))["records"][0]["payload"] == "B"


async def test_same_transaction_id_in_another_queue_is_queued(
        http: httpx.AsyncClient, queue_name: str) -> None:
    (a,) = await _push(http, _item(queue_name, "shared"))
    (b,) = await _push(http, _item(queue_name + "-other", "shared"))
    assert a["status"] == b["status"] == "queued"


async def test_window_zero_set_by_configure_allows_duplicates(
        http: httpx.AsyncClient, queue_name: str) -> None:
    config = await _configure(http, queue_name, dedupWindowSeconds=0)
    assert config["options"]["dedupWindowSeconds"] == 0
    answers = []
    for n in range(3):
        answers += await _push(http, _item(queue_name, "same", n))
    assert [a["status"] for a in answers] == ["queued"] * 3
    assert len({a["message_id"] for a in answers}) == 3
    entry = await fetch_records(http, queue_name)
    assert [(r["offset"], r["transactionId"], r["payload"]) for r in entry["records"]] == [
        (0, "same", 0), (1, "same", 1), (2, "same", 2)]


async def test_window_change_applies_to_a_queue_that_already_has_data(
        http: httpx.AsyncClient, queue_name: str) -> None:
    assert (await _push(http, _item(queue_name, "k")))[0]["status"] == "queued"
    await _configure(http, queue_name, dedupWindowSeconds=0)
    assert (await _push(http, _item(queue_name, "k")))[0]["status"] == "queued"
    await _configure(http, queue_name, dedupWindowSeconds=3600)
    assert (await _push(http, _item(queue_name, "k")))[0]["status"] == "duplicate"


async def test_repeats_within_one_request_first_wins_and_later_ones_carry_its_id(
        http: httpx.AsyncClient, queue_name: str) -> None:
    answers = await _push(http, _item(queue_name, "a", "a1"), _item(queue_name, "b", "b1"),
                          _item(queue_name, "a", "a2"), _item(queue_name, "c", "c1"),
                          _item(queue_name, "a", "a3"), _item(queue_name, "b", "b2"))
    assert [a["index"] for a in answers] == list(range(6))
    assert [a["status"] for a in answers] == [
        "queued", "queued", "duplicate", "queued", "duplicate", "duplicate"]
    assert answers[2]["message_id"] == answers[4]["message_id"] == answers[0]["message_id"]
    assert answers[5]["message_id"] == answers[1]["message_id"]
    entry = await fetch_records(http, queue_name)
    # Duplicates consume no offsets.
    assert [(r["offset"], r["transactionId"], r["payload"]) for r in entry["records"]] == [
        (0, "a", "a1"), (1, "b", "b1"), (2, "c", "c1")]
    assert entry["highWatermark"] == 3


async def test_request_mixing_stored_duplicates_and_new_ids_writes_only_the_new_ones(
        http: httpx.AsyncClient, queue_name: str) -> None:
    (old,) = await _push(http, _item(queue_name, "old", "first"))
    answers = await _push(http, _item(queue_name, "new-1", "n1"), _item(queue_name, "old", "x"),
                          _item(queue_name, "new-2", "n2"))
    assert [a["status"] for a in answers] == ["queued", "duplicate", "queued"]
    assert answers[1]["message_id"] == old["message_id"]
    entry = await fetch_records(http, queue_name)
    assert [(r["offset"], r["transactionId"]) for r in entry["records"]] == [
        (0, "old"), (1, "new-1"), (2, "new-2")]


async def test_missing_or_empty_transaction_id_defaults_to_the_message_id(
        http: httpx.AsyncClient, queue_name: str) -> None:
    answers = await _push(http, {"queue": queue_name, "payload": 1},
                          {"queue": queue_name, "payload": 2, "transactionId": ""})
    assert [a["status"] for a in answers] == ["queued", "queued"]
    for a in answers:
        assert a["transaction_id"] == a["message_id"]
    entry = await fetch_records(http, queue_name)
    assert [r["transactionId"] for r in entry["records"]] == [a["message_id"] for a in answers]


async def test_interleaved_repeats_within_one_request_store_each_id_once_in_order(
        http: httpx.AsyncClient, queue_name: str) -> None:
    ids = ["a", "a", "b", "b", "c", "c", "a", "d", "c"]
    answers = await _push(http, *(_item(queue_name, t, f"{t}{n}") for n, t in enumerate(ids)))
    assert [a["status"] for a in answers] == [
        "queued", "duplicate", "queued", "duplicate", "queued", "duplicate", "duplicate",
        "queued", "duplicate"]
    by_id = {a["transaction_id"]: a["message_id"] for a in answers if a["status"] == "queued"}
    assert all(a["message_id"] == by_id[a["transaction_id"]] for a in answers)
    entry = await fetch_records(http, queue_name)
    assert [(r["offset"], r["payload"]) for r in entry["records"]] == [
        (0, "a0"), (1, "b2"), (2, "c4"), (3, "d7")]


async def test_window_zero_keeps_repeats_within_one_request_in_request_order(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await _configure(http, queue_name, dedupWindowSeconds=0)
    ids = ["a", "a", "b", "a", "c", "b"]
    answers = await _push(http, *(_item(queue_name, t, n) for n, t in enumerate(ids)))
    assert [a["status"] for a in answers] == ["queued"] * len(ids)
    assert len({a["message_id"] for a in answers}) == len(ids)
    entry = await fetch_records(http, queue_name)
    assert [(r["offset"], r["transactionId"], r["payload"]) for r in entry["records"]] == [
        (n, t, n) for n, t in enumerate(ids)]


async def test_window_zero_concurrent_pushes_of_one_id_are_all_queued(
        broker: BrokerProcess, queue_name: str) -> None:
    # Before the fix, pushes the coalescer merged into one flush were answered `duplicate`
    # (and dropped) although deduplication was off: 26 of 30 in one measured run.
    limits = httpx.Limits(max_connections=30, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=broker.url, timeout=30, limits=limits) as client:
        await _configure(client, queue_name, dedupWindowSeconds=0)
        answers = await asyncio.gather(*(
            _push(client, _item(queue_name, "same", n)) for n in range(30)))
        entry = await fetch_records(client, queue_name)
    assert [a[0]["status"] for a in answers] == ["queued"] * 30
    assert [r["offset"] for r in entry["records"]] == list(range(30))
    assert sorted(r["payload"] for r in entry["records"]) == list(range(30))
