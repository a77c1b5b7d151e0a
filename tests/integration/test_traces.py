"""Traces (§6.4) through the HTTP API and the official client's `trace()` and admin calls:
recording, lookups by message and by name, the names listing, bad input, deletion with the
queue, and the reaper's trace retention."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import httpx
import pytest
from queen import Queen

from core.storage.database import Database
from core.upkeep import maintenance
from tests.support import BrokerProcess


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def push_and_pop(http: httpx.AsyncClient, queue: str, n: int = 1,
                       group: str | None = None) -> list[dict[str, Any]]:
    items = [{"queue": queue, "payload": {"n": i}, "transactionId": f"{queue}-t{i}"}
             for i in range(n)]
    assert (await http.post("/api/v1/push", json={"items": items})).status_code == 201
    params: dict[str, Any] = {"batch": n}
    if group:
        params["consumerGroup"] = group
    answer = await http.get(f"/api/v1/pop/queue/{queue}", params=params)
    assert answer.status_code == 200
    messages: list[dict[str, Any]] = answer.json()["messages"]
    return messages


async def trace(http: httpx.AsyncClient, message: dict[str, Any], data: Any,
                names: list[str] | None = None, **extra: Any) -> httpx.Response:
    return await http.post("/api/v1/traces", json={
        "transactionId": message["transactionId"], "partitionId": message["partitionId"],
        "consumerGroup": message["consumerGroup"], "traceNames": names, "data": data,
        **extra})


async def test_a_trace_is_recorded_and_found_by_message_with_its_worker(
        http: httpx.AsyncClient, queue_name: str) -> None:
    [msg] = await push_and_pop(http, queue_name, group="g1")
    name = unique("order")
    first = await trace(http, msg, {"step": 1, "z": [1, 2]}, [name], eventType="step")
    assert first.status_code == 201
    body = first.json()
    assert body["success"] is True and uuid.UUID(body["traceId"])
    second = await trace(http, msg, "plain text")
    assert second.status_code == 201

    found = (await http.get(f"/api/v1/traces/{msg['partitionId']}/{msg['transactionId']}")).json()
    traces = found["traces"]
    assert [t["data"] for t in traces] == [{"step": 1, "z": [1, 2]}, "plain text"]
    assert found["truncated"] is False and found["nextOffset"] == 2
    assert traces[0]["id"] == body["traceId"]
    assert traces[0]["event_type"] == "step" and traces[1]["event_type"] == "info"
    assert traces[0]["trace_names"] == [name] and traces[1]["trace_names"] == []
    assert {t["consumer_group"] for t in traces} == {"g1"}
    # The worker is the lease holder at the time: the pop's leaseId.
    assert {t["worker_id"] for t in traces} == {msg["leaseId"]}
    assert all(t["created_at"].endswith("Z") for t in traces)
    # Another message of the same partition has none.
    other = await http.get(f"/api/v1/traces/{msg['partitionId']}/nobody")
    assert other.json() == {"traces": [], "truncated": False, "nextOffset": 0}


async def test_lookup_by_name_spans_messages_with_their_payload_and_pages(
        http: httpx.AsyncClient, queue_name: str) -> None:
    messages = await push_and_pop(http, queue_name, 3)
    name = unique("saga")
    for i, msg in enumerate(messages):
        assert (await trace(http, msg, {"i": i}, [name, unique("solo")])).status_code == 201
    page = (await http.get(f"/api/v1/traces/by-name/{name}", params={"limit": 2})).json()
    assert page["total"] == 3 and page["pagination"] == {"limit": 2, "offset": 0}
    assert [t["data"] for t in page["traces"]] == [{"i": 2}, {"i": 1}]  # newest first
    newest = page["traces"][0]
    assert newest["transaction_id"] == messages[2]["transactionId"]
    assert newest["partition_id"] == messages[2]["partitionId"]
    assert (newest["queue_name"], newest["partition_name"]) == (queue_name, "Default")
    assert newest["message_payload"] == {"n": 2}
    rest = (await http.get(f"/api/v1/traces/by-name/{name}",
                           params={"limit": 2, "offset": 2})).json()
    assert [t["data"] for t in rest["traces"]] == [{"i": 0}]
    unknown = (await http.get(f"/api/v1/traces/by-name/{unique('nothing')}")).json()
    assert unknown["traces"] == [] and unknown["total"] == 0


async def test_names_listing_counts_traces_and_distinct_messages(
        http: httpx.AsyncClient, queue_name: str) -> None:
    a, b = await push_and_pop(http, queue_name, 2)
    tag = unique("tag")
    name = f"{tag}/with-slash"  # a name may contain '/': by-name takes the rest of the path
    for msg, times in ((a, 3), (b, 1)):
        for _ in range(times):
            assert (await trace(http, msg, None, [name])).status_code == 201
    listing = (await http.get("/api/v1/traces/names", params={"search": tag})).json()
    assert listing["total"] == 1
    [entry] = listing["trace_names"]
    assert (entry["trace_name"], entry["trace_count"], entry["message_count"]) == (name, 4, 2)
    assert entry["last_seen"].endswith("Z")
    by_name = (await http.get(f"/api/v1/traces/by-name/{name}")).json()
    assert by_name["total"] == 4


@pytest.mark.parametrize("body,error", [
    ({"partitionId": "1", "data": {}}, "transactionId is required"),
    ({"transactionId": "t", "data": {}}, "partitionId is required"),
    ({"transactionId": "t", "partitionId": "1"}, "data is required"),
    ({"transactionId": "", "partitionId": "1", "data": 1}, "transactionId is required"),
    ({"transactionId": "t", "partitionId": "x1", "data": 1}, "partitionId must be"),
    ({"transactionId": "t", "partitionId": "1", "data": 1, "traceNames": [""]},
     "traceNames must not contain empty names"),
    ({"transactionId": "t", "partitionId": "1", "data": 1, "traceNames": ["a\nb"]},
     "traceNames[0] contains control characters"),
    ({"transactionId": "t", "partitionId": "1", "data": 1, "traceNames": "a"},
     "traceNames must be"),
])
async def test_bad_trace_bodies_answer_400_naming_the_problem(
        http: httpx.AsyncClient, body: dict[str, Any], error: str) -> None:
    answer = await http.post("/api/v1/traces", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"].startswith(error)


async def test_a_trace_of_an_unknown_partition_answers_404_and_stores_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    name = unique("ghost")
    answer = await http.post("/api/v1/traces", json={
        "transactionId": "t", "partitionId": "999999999999", "data": {}, "traceNames": [name]})
    assert answer.status_code == 404 and answer.json()["error"] == "partition not found"
    assert await db.fetchval("SELECT count(*) FROM queen.trace_names WHERE name = $1",
                             name) == 0


async def test_official_client_trace_and_admin_lookups(
        broker: BrokerProcess, queue_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique("client")
    done = asyncio.Event()
    results: list[dict[str, Any]] = []

    async def handler(message: dict[str, Any]) -> None:
        results.append(await message["trace"]({"traceName": name, "data": {"seen": True}}))
        results.append(await message["trace"]({"eventType": "error", "data": {"x": 1}}))
        done.set()

    async with Queen(broker.url) as client:
        await client.queue(queue_name).push([{"data": {"hello": "world"}}])
        await asyncio.wait_for(client.queue(queue_name).group("cg").batch(1)
                               .timeout_millis(1000).consume(handler, signal=done), 30)
        assert [r["success"] for r in results] == [True, True]
        assert "TRACE FAILED" not in capsys.readouterr().out
        by_name = await client.admin.get_traces_by_name(name, limit=10)
        [found] = by_name["traces"]
        assert found["data"] == {"seen": True} and found["consumer_group"] == "cg"
        assert found["message_payload"] == {"hello": "world"}
        of_message = await client.admin.get_traces_for_message(found["partition_id"],
                                                               found["transaction_id"])
        assert [t["event_type"] for t in of_message["traces"]] == ["info", "error"]
        names = await client.admin.get_trace_names(search=name)
        assert [n["trace_name"] for n in names["trace_names"]] == [name]


async def test_deleting_the_queue_deletes_its_traces(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    [msg] = await push_and_pop(http, queue_name)
    name = unique("doomed")
    assert (await trace(http, msg, 1, [name])).status_code == 201
    assert (await http.delete(f"/api/v1/resources/queues/{queue_name}")).json()["deleted"]
    assert (await http.get(f"/api/v1/traces/by-name/{name}")).json()["total"] == 0
    assert await db.fetchval("SELECT count(*) FROM queen.traces WHERE partition_id = $1",
                             int(msg["partitionId"])) == 0


async def test_reaper_deletes_traces_past_retention_and_keeps_younger_ones(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    old_msg, young_msg = await push_and_pop(http, queue_name, 2)
    name = unique("aged")
    for msg in (old_msg, young_msg):
        assert (await trace(http, msg, 1, [name])).status_code == 201
    # Back-date one trace (and its name row) by two days.
    await db.execute(
        "UPDATE queen.traces SET created_at = now() - interval '2 days' "
        "WHERE partition_id = $1 AND transaction_id = $2", int(old_msg["partitionId"]),
        old_msg["transactionId"])
    await db.execute(
        "UPDATE queen.trace_names n SET created_at = t.created_at FROM queen.traces t "
        "WHERE n.trace_id = t.id AND n.name = $1", name)
    report = await maintenance.run_pass(core_db, retention=True, segment_batch=100,
                                        trace_retention_seconds=86400)
    assert report.traces_deleted >= 1
    left = (await http.get(f"/api/v1/traces/by-name/{name}")).json()
    assert [t["transaction_id"] for t in left["traces"]] == [young_msg["transactionId"]]
    assert await db.fetchval("SELECT count(*) FROM queen.trace_names WHERE name = $1",
                             name) == 1
    # Retention 0 keeps everything.
    kept = await maintenance.run_pass(core_db, retention=True, segment_batch=100)
    assert kept.traces_deleted == 0
