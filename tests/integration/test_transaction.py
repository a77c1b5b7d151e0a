"""`POST /api/v1/transaction` (§4.7): pushes and acks commit together or not at all."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from tests.support import (
    configure,
    cursor_row,
    dlq_rows,
    expire_leases_of,
    fetch_records,
    pop_json,
    push_items,
    queue_counts,
)

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all


def ack_op(message: dict[str, Any], status: str = "completed", *, lease: bool = True,
           group: str | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"type": "ack", "transactionId": message["transactionId"],
                          "partitionId": message["partitionId"], "status": status}
    if lease:
        op["leaseId"] = message["leaseId"]
    if group:
        op["consumerGroup"] = group
    return op


def push_op(queue: str, *payloads: Any, partition: str | None = None,
            prefix: str = "x") -> dict[str, Any]:
    items = []
    for i, p in enumerate(payloads):
        item = {"queue": queue, "payload": p, "transactionId": f"{prefix}{i}"}
        if partition is not None:
            item["partition"] = partition
        items.append(item)
    return {"type": "push", "items": items}


async def test_push_and_ack_commit_together_and_answer_flat_results(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    out = queue_name + "-out"
    await push_items(http, queue_name, ["in0", "in1"])
    body = await pop_json(http, queue_name, batch=2, consumerGroup="g")
    assert body is not None
    m0, m1 = body["messages"]
    r = await http.post("/api/v1/transaction", json={
        "operations": [push_op(out, {"from": "in0"}, {"from": "in1"}),
                       ack_op(m0, group="g"), ack_op(m1, group="g")],
        "requiredLeases": [body["leaseId"]]})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["success"] is True
    assert answer["transactionId"]
    results = answer["results"]
    assert [(e["index"], e["type"]) for e in results] == [
        (0, "push"), (1, "push"), (2, "ack"), (3, "ack")]
    assert [e["transactionId"] for e in results] == ["x0", "x1", "t0", "t1"]
    assert all(e["success"] for e in results)
    assert results[0]["queueName"] == out and results[0]["messageId"]
    assert results[2]["error"] is None and results[2]["dlq"] is False
    row = await cursor_row(db, queue_name, "g")
    assert row is not None and (row["committed"], row["worker_id"]) == (1, None)
    records = (await fetch_records(http, out))["records"]
    assert [rec["payload"] for rec in records] == [{"from": "in0"}, {"from": "in1"}]
    # Pushed messages are visible to pops at once.
    got = await pop_json(http, out, batch=5)
    assert got is not None and len(got["messages"]) == 2


async def test_stale_lease_rolls_back_the_pushes_too(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    out = queue_name + "-out"
    await push_items(http, out, ["existing"], prefix="e")
    await push_items(http, queue_name, ["in0"])
    body = await pop_json(http, queue_name)
    assert body is not None
    await expire_leases_of(db, queue_name)
    before = await queue_counts(db, out)
    r = await http.post("/api/v1/transaction", json={
        "operations": [push_op(out, "must-not-land"), ack_op(body["messages"][0])],
        "requiredLeases": [body["leaseId"]]})
    assert r.status_code == 200
    answer = r.json()
    assert answer["success"] is False
    assert answer["results"] == []
    assert "invalid or expired lease" in answer["error"]
    assert await queue_counts(db, out) == before
    assert [rec["payload"] for rec in (await fetch_records(http, out))["records"]] == [
        "existing"]
    assert (await cursor_row(db, queue_name))["committed"] == -1  # type: ignore[index]


async def test_unknown_transaction_id_rolls_back_everything_including_other_acks(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    out = queue_name + "-new"
    await push_items(http, queue_name, ["in0", "in1"])
    body = await pop_json(http, queue_name, batch=2)
    assert body is not None
    m0, _ = body["messages"]
    r = await http.post("/api/v1/transaction", json={
        "operations": [ack_op(m0), push_op(out, "ghost"),
                       ack_op({**m0, "transactionId": "no-such-id"})],
        "requiredLeases": [body["leaseId"]]})
    answer = r.json()
    assert (r.status_code, answer["success"], answer["results"]) == (200, False, [])
    assert answer["reason"] == "ack_rejected"
    assert "'no-such-id'" in answer["error"] and "rejected: unresolvable: " in answer["error"]
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["worker_id"]) == (-1, body["leaseId"])
    assert (await queue_counts(db, out))["segments"] == 0


async def test_ack_op_without_lease_is_checked_against_the_single_required_lease(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, retryDelay=0)  # redelivery at once
    await push_items(http, queue_name, ["in0"])
    body = await pop_json(http, queue_name)
    assert body is not None
    # The single required lease is the one checked, never whoever holds the partition now
    # (it used to be the group's current lease while that one was live).
    op = ack_op(body["messages"][0], "retry", lease=False)
    r = await http.post("/api/v1/transaction", json={
        "operations": [op], "requiredLeases": ["somebody-else"]})
    assert (r.json()["success"], r.json()["reason"]) == (False, "ack_rejected")
    assert (await cursor_row(db, queue_name))["worker_id"] == body["leaseId"]  # type: ignore[index]
    r = await http.post("/api/v1/transaction", json={
        "operations": [op], "requiredLeases": [body["leaseId"]]})
    assert r.json()["success"] is True
    body = await pop_json(http, queue_name)
    assert body is not None
    # The lease expires and the reaper clears it: now the lent lease decides.
    await expire_leases_of(db, queue_name)
    await db.execute("UPDATE queen.log_consumers SET worker_id = NULL, batch_end = NULL, "
                     "lease_expires_at = NULL WHERE worker_id = $1", body["leaseId"])
    op = ack_op(body["messages"][0], lease=False)
    r = await http.post("/api/v1/transaction", json={
        "operations": [op, push_op(queue_name + "-x", "no")],
        "requiredLeases": [body["leaseId"]]})
    assert r.json()["success"] is False
    assert (await cursor_row(db, queue_name))["committed"] == -1  # type: ignore[index]
    assert (await queue_counts(db, queue_name + "-x"))["segments"] == 0
    r = await http.post("/api/v1/transaction", json={"operations": [op], "requiredLeases": []})
    assert r.json()["success"] is True  # no lease anywhere: a lease-less ack
    assert (await cursor_row(db, queue_name))["committed"] == 0  # type: ignore[index]


async def test_failed_ack_in_a_transaction_dead_letters_and_reports_dlq(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    r = await http.post("/api/v1/configure", json={"queue": queue_name,
                                                   "options": {"retryLimit": 0}})
    assert r.status_code == 200
    await push_items(http, queue_name, ["bad"])
    body = await pop_json(http, queue_name)
    assert body is not None
    r = await http.post("/api/v1/transaction", json={
        "operations": [{**ack_op(body["messages"][0], "failed"), "error": "tx boom"}],
        "requiredLeases": [body["leaseId"]]})
    answer = r.json()
    assert answer["success"] is True and answer["results"][0]["dlq"] is True
    [dead] = await dlq_rows(db, queue_name)
    assert (dead["error_message"], dead["payload_text"]) == ("tx boom", '"bad"')


async def test_duplicate_pushes_inside_and_across_transactions_are_non_fatal(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await push_items(http, queue_name, ["stored"], prefix="dup")
    r = await http.post("/api/v1/transaction", json={"operations": [
        {"type": "push", "items": [
            {"queue": queue_name, "payload": "new", "transactionId": "fresh"},
            {"queue": queue_name, "payload": "again", "transactionId": "fresh"},
            {"queue": queue_name, "payload": "old", "transactionId": "dup0"}]}]})
    answer = r.json()
    assert answer["success"] is True
    res = answer["results"]
    assert [e.get("duplicate", False) for e in res] == [False, True, True]
    assert res[1]["messageId"] == res[0]["messageId"]
    records = (await fetch_records(http, queue_name))["records"]
    assert [rec["payload"] for rec in records] == ["stored", "new"]


async def test_flat_push_form_and_data_key_are_accepted(
        http: httpx.AsyncClient, queue_name: str) -> None:
    r = await http.post("/api/v1/transaction", json={"operations": [
        {"type": "push", "queue": queue_name, "partition": "P", "data": {"k": 1},
         "transactionId": "flat"}]})
    assert r.json()["success"] is True
    records = (await fetch_records(http, queue_name, "P"))["records"]
    assert [(rec["payload"], rec["transactionId"]) for rec in records] == [({"k": 1}, "flat")]


@pytest.mark.parametrize(("body", "fragment"), [
    ({}, "operations array is required"),
    ({"operations": "x"}, "operations array is required"),
    ({"operations": [{"type": "delete"}]}, "operations[1].type"),
    ({"operations": [5]}, "operations[1] must be an object"),
    ({"operations": [{"type": "ack", "partitionId": "1"}]}, "transactionId"),
    ({"operations": [], "kv": [{"op": "put", "ns": "a", "key": "b"}]}, "kv_bad_request"),
    ({"operations": [], "timers": [{"op": "schedule"}]}, "timers_bad_request"),
    ({"operations": [], "requiredLeases": "lease"}, "requiredLeases"),
])
async def test_bad_transaction_answers_400_in_the_failure_shape_and_applies_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str,
        body: dict[str, Any], fragment: str) -> None:
    body = {**body, "operations": [push_op(queue_name, "no"), *body["operations"]]} \
        if isinstance(body.get("operations"), list) else body
    r = await http.post("/api/v1/transaction", json=body)
    assert r.status_code == 400, r.text
    answer = r.json()
    assert answer["success"] is False and answer["results"] == []
    assert fragment in answer["error"]
    assert (await queue_counts(db, queue_name))["segments"] == 0


async def test_unparseable_transaction_body_answers_400(http: httpx.AsyncClient) -> None:
    r = await http.post("/api/v1/transaction", content=b"[oops",
                        headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]
