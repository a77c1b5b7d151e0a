"""Queue management: implicit creation with derived namespace/task, configure merge/replace
(§4.9), and delete removing everything the queue owns (§4.10)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import httpx

from core import options
from tests.support import BrokerProcess, fetch_records, queue_counts


async def _configure(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    r = await http.post("/api/v1/configure", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    return r.json()  # type: ignore[no-any-return]


async def _stored(db: asyncpg.Connection, queue: str) -> asyncpg.Record:
    row = await db.fetchrow(
        "SELECT id, namespace, task, options::text AS options FROM queen.queues WHERE name = $1",
        queue)
    assert row is not None
    return row


async def test_push_creates_the_queue_with_namespace_and_task_from_the_dotted_name(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    name = f"billing.{queue_name}.eu.west"
    r = await http.post("/api/v1/push", json={"items": [{"queue": name, "payload": 1}]})
    assert r.status_code == 201
    row = await _stored(db, name)
    assert (row["namespace"], row["task"]) == ("billing", queue_name)
    assert json.loads(row["options"]) == options.DEFAULTS


async def test_push_to_an_undotted_name_uses_the_whole_name_as_namespace(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await http.post("/api/v1/push", json={"items": [{"queue": queue_name, "payload": 1}]})
    row = await _stored(db, queue_name)
    assert (row["namespace"], row["task"]) == (queue_name, "")


async def test_configure_creates_the_queue_and_echoes_every_option(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    name = f"shop.{queue_name}"
    answer = await _configure(http, {"queue": name, "options": {"leaseTime": 30}})
    row = await _stored(db, name)
    assert answer == {
        "configured": True, "queueId": str(row["id"]), "partitionId": None, "queue": name,
        "namespace": "shop", "task": queue_name,
        "options": {**options.DEFAULTS, "leaseTime": 30}}
    assert list(answer["options"]) == list(options.DEFAULTS)
    assert json.loads(row["options"]) == answer["options"]


async def test_configure_namespace_and_task_override_the_derived_ones(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    name = f"a.b.{queue_name}"
    answer = await _configure(http, {"queue": name, "namespace": "ns", "task": "tk"})
    assert (answer["namespace"], answer["task"]) == ("ns", "tk")
    # null (as the official client sends when unset) keeps what is stored
    answer = await _configure(http, {"queue": name, "namespace": None, "task": None})
    assert (answer["namespace"], answer["task"]) == ("ns", "tk")
    row = await _stored(db, name)
    assert (row["namespace"], row["task"]) == ("ns", "tk")


async def test_configure_of_a_pushed_queue_keeps_its_data(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await http.post("/api/v1/push", json={"items": [{"queue": queue_name, "payload": "kept"}]})
    await _configure(http, {"queue": queue_name, "options": {"retryLimit": 9}})
    entry = await fetch_records(http, queue_name)
    assert [r["payload"] for r in entry["records"]] == ["kept"]


async def test_configure_merges_by_default_resets_null_and_replace_resets_omitted(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    first = await _configure(http, {"queue": queue_name,
                                    "options": {"leaseTime": 10, "priority": 5}})
    assert (first["options"]["leaseTime"], first["options"]["priority"]) == (10, 5)

    merged = await _configure(http, {"queue": queue_name, "options": {"retryLimit": 7}})
    assert merged["options"] == {**options.DEFAULTS, "leaseTime": 10, "priority": 5,
                                 "retryLimit": 7}

    top_level = await _configure(http, {"queue": queue_name, "dedupWindowSeconds": 0})
    assert top_level["options"]["dedupWindowSeconds"] == 0
    assert top_level["options"]["retryLimit"] == 7

    reset = await _configure(http, {"queue": queue_name, "options": {"leaseTime": None}})
    assert reset["options"]["leaseTime"] == 300
    assert reset["options"]["priority"] == 5

    replaced = await _configure(http, {"queue": queue_name, "mode": "replace",
                                       "options": {"retryLimit": 1}})
    assert replaced["options"] == {**options.DEFAULTS, "retryLimit": 1}
    assert json.loads((await _stored(db, queue_name))["options"]) == replaced["options"]

    empty = await _configure(http, {"queue": queue_name})
    assert empty["options"] == replaced["options"]


async def test_concurrent_configures_of_one_new_queue_all_succeed_and_merge(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    keys = ["leaseTime", "retryLimit", "ttl", "dedupWindowSeconds", "retryDelay",
            "windowBuffer"]
    answers = await asyncio.gather(*(
        _configure(http, {"queue": queue_name, "options": {key: 11}}) for key in keys))
    assert all(a["configured"] for a in answers)
    stored = json.loads((await _stored(db, queue_name))["options"])
    assert all(stored[key] == 11 for key in keys)
    assert await db.fetchval("SELECT count(*) FROM queen.queues WHERE name = $1",
                             queue_name) == 1


async def test_configure_refuses_an_empty_queue_name(http: httpx.AsyncClient) -> None:
    # wire-protocol §2 lets configure accept "", but no route could address that queue
    # afterwards (the name rule, docs/guide/queues.md).
    r = await http.post("/api/v1/configure", json={"queue": "", "options": {}})
    assert r.status_code == 400 and r.json() == {"error": "queue must not be empty"}


async def test_delete_removes_everything_and_answers_existed_false_the_second_time(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    items = [{"queue": queue_name, "partition": f"p{i % 3}", "payload": i,
              "transactionId": f"t{i}"} for i in range(9)]
    r = await http.post("/api/v1/push", json={"items": items})
    assert r.status_code == 201
    before = await queue_counts(db, queue_name)
    assert before == {"queues": 1, "partitions": 3, "segments": 3, "txn_index": 9}

    r = await http.delete(f"/api/v1/resources/queues/{queue_name}")
    assert r.status_code == 200
    assert r.json() == {"deleted": True, "queue": queue_name, "existed": True}
    assert await queue_counts(db, queue_name) == {
        "queues": 0, "partitions": 0, "segments": 0, "txn_index": 0}

    r = await http.delete(f"/api/v1/resources/queues/{queue_name}")
    assert r.status_code == 200
    assert r.json() == {"deleted": False, "queue": queue_name, "existed": False,
                        "message": "Queue not found, nothing was deleted"}


async def test_delete_leaves_other_queues_alone(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    other = queue_name + "-keep"
    await http.post("/api/v1/push", json={"items": [{"queue": queue_name, "payload": 1},
                                                    {"queue": other, "payload": 2}]})
    await http.delete(f"/api/v1/resources/queues/{queue_name}")
    assert (await queue_counts(db, other))["segments"] == 1
    assert [r["payload"] for r in (await fetch_records(http, other))["records"]] == [2]


async def test_delete_accepts_percent_encoded_names(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    name = f"{queue_name} x+ü"
    await http.post("/api/v1/push", json={"items": [{"queue": name, "payload": 1}]})
    r = await http.delete(f"/api/v1/resources/queues/{queue_name}%20x%2B%C3%BC")
    assert r.json()["existed"] is True and r.json()["queue"] == name
    assert (await queue_counts(db, name))["queues"] == 0


async def test_push_after_delete_recreates_the_queue_from_offset_0_on_every_worker(
        broker: BrokerProcess, db: asyncpg.Connection, queue_name: str) -> None:
    # Fresh connections spread the pushes over both workers, so both cache the partition;
    # the delete reaches only one of them, and the other must notice its stale cache.
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=broker.url, timeout=30, limits=limits) as client:
        async def push(txid: str, payload: Any) -> dict[str, Any]:
            r = await client.post("/api/v1/push", json={"items": [
                {"queue": queue_name, "transactionId": txid, "payload": payload}]})
            assert r.status_code == 201, r.text
            return r.json()[0]  # type: ignore[no-any-return]

        old = await asyncio.gather(*(push(f"t{i}", "old") for i in range(20)))
        assert {a["status"] for a in old} == {"queued"}
        r = await client.delete(f"/api/v1/resources/queues/{queue_name}")
        assert r.json()["existed"] is True

        new = await asyncio.gather(*(push(f"t{i}", "new") for i in range(20)))
        # Same transactionIds: the old index went with the queue, so none is a duplicate.
        assert [a["status"] for a in new] == ["queued"] * 20
        assert len({a["partition_id"] for a in new}) == 1
        assert new[0]["partition_id"] != old[0]["partition_id"]
        entry = await fetch_records(client, queue_name)
    assert [r["offset"] for r in entry["records"]] == list(range(20))
    assert {r["payload"] for r in entry["records"]} == {"new"}
    counts = await queue_counts(db, queue_name)
    assert (counts["queues"], counts["partitions"], counts["txn_index"]) == (1, 1, 20)
