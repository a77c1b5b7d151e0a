"""The lease a transaction's ack op is checked against (docs/acks.md): its own `leaseId`
alone; an op without one borrows the bundle's required lease only when the bundle names
exactly one. A refused bundle answers 200, `success: false`, `reason: ack_rejected`, and
applies nothing, so each holder can still settle its own message afterwards.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest
from queen import Queen

from tests.support import (
    BrokerProcess,
    announce_changed,
    cursor_row,
    expire_leases_of,
    pop_json,
    push_items,
    queue_counts,
)

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all

QUEUE_MODE = "__QUEUE_MODE__"


def ack_op(message: dict[str, Any], *, lease: bool = True,
           group: str | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"type": "ack", "transactionId": message["transactionId"],
                          "partitionId": message["partitionId"], "status": "completed"}
    if lease:
        op["leaseId"] = message["leaseId"]
    if group is not None:
        op["consumerGroup"] = group
    return op


def stale_lease_error(message: dict[str, Any], group: str = QUEUE_MODE) -> str:
    return (f"ack of transactionId '{message['transactionId']}' (partitionId "
            f"{message['partitionId']}, consumer group '{group}') rejected: invalid or expired "
            "lease; transaction rolled back")


async def taken_over(http: httpx.AsyncClient, db: asyncpg.Connection, queue: str,
                     group: str | None = None
                     ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Partition A popped under lease 1 and B under lease 2; lease 1 runs out and another
    consumer pops A under lease 3. Answers (A as lease 1 got it, B, A as lease 3 got it)."""
    await push_items(http, queue, ["a"], partition="A", prefix="a")
    await push_items(http, queue, ["b"], partition="B", prefix="b")
    params: dict[str, Any] = {"consumerGroup": group} if group else {}
    first = await _pop_partition(http, queue, "A", **params)
    second = await _pop_partition(http, queue, "B", **params)
    await db.execute("UPDATE queen.log_consumers SET lease_expires_at = now() - interval '1 s'"
                     " WHERE worker_id = $1", first["leaseId"])
    await announce_changed(db, queue)  # as the reaper announces the leases it releases
    third = await _pop_partition(http, queue, "A", **params)
    assert len({first["leaseId"], second["leaseId"], third["leaseId"]}) == 3
    return first, second, third


async def _pop_partition(http: httpx.AsyncClient, queue: str, partition: str,
                         **params: Any) -> dict[str, Any]:
    r = await http.get(f"/api/v1/pop/queue/{queue}/partition/{partition}",
                       params={"wait": "false", **params})
    assert r.status_code == 200, r.text
    [message] = r.json()["messages"]
    return message  # type: ignore[no-any-return]


async def holders(db: asyncpg.Connection, queue: str, group: str = QUEUE_MODE
                  ) -> list[tuple[int, str | None]]:
    rows = [await cursor_row(db, queue, group, p) for p in ("A", "B")]
    return [(r["committed"], r["worker_id"]) for r in rows if r is not None]


@pytest.mark.parametrize("group", [None, "g"])
async def test_a_bundle_whose_first_lease_was_taken_over_rolls_back_whole(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str,
        group: str | None) -> None:
    a1, b2, a3 = await taken_over(http, db, queue_name, group)
    out = queue_name + "-out"
    before = await holders(db, queue_name, group or QUEUE_MODE)
    r = await http.post("/api/v1/transaction", json={
        "operations": [ack_op(a1, group=group), ack_op(b2, group=group),
                       {"type": "push", "items": [{"queue": out, "payload": "x"}]}],
        "requiredLeases": [a1["leaseId"], b2["leaseId"]]})
    assert r.status_code == 200
    answer = r.json()
    assert (answer["success"], answer["reason"], answer["results"]) == (
        False, "ack_rejected", [])
    assert answer["error"] == stale_lease_error(a1, group or QUEUE_MODE)
    assert await holders(db, queue_name, group or QUEUE_MODE) == before
    assert (await queue_counts(db, out))["segments"] == 0
    # Each holder settles its own message afterwards.
    for message in (a3, b2):
        r = await http.post("/api/v1/transaction", json={
            "operations": [ack_op(message, group=group)],
            "requiredLeases": [message["leaseId"]]})
        assert r.json()["success"] is True, r.text
    assert await holders(db, queue_name, group or QUEUE_MODE) == [(0, None), (0, None)]


async def test_official_client_bundle_of_two_leases_one_taken_over_raises(
        broker: BrokerProcess, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    async with Queen(broker.url) as client:
        for p in ("A", "B"):
            await client.queue(queue_name).partition(p).push([{"data": p}])
        [a1] = await client.queue(queue_name).partition("A").wait(False).pop()
        [b2] = await client.queue(queue_name).partition("B").wait(False).pop()
        await db.execute("UPDATE queen.log_consumers SET lease_expires_at = now() - "
                         "interval '1 s' WHERE worker_id = $1", a1["leaseId"])
        await announce_changed(db, queue_name)
        [a3] = await client.queue(queue_name).partition("A").wait(False).pop()
        assert a3["leaseId"] != a1["leaseId"]
        with pytest.raises(Exception) as refused:
            await client.transaction().ack([a1, b2]).queue(queue_name + "-out").push(
                [{"data": "never"}]).commit()
        assert str(refused.value) == stale_lease_error(a1)
        assert (await queue_counts(db, queue_name + "-out"))["segments"] == 0
        await client.transaction().ack(a3).commit()
        await client.transaction().ack(b2).commit()
    assert await holders(db, queue_name) == [(0, None), (0, None)]


async def test_an_op_without_a_lease_borrows_the_single_required_lease_not_the_holders(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["in0"])
    body = await pop_json(http, queue_name)
    assert body is not None
    message = body["messages"][0]
    r = await http.post("/api/v1/transaction", json={
        "operations": [ack_op(message, lease=False)], "requiredLeases": ["somebody-else"]})
    answer = r.json()
    assert (answer["success"], answer["reason"]) == (False, "ack_rejected")
    assert answer["error"] == stale_lease_error(message)
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["worker_id"]) == (-1, body["leaseId"])
    r = await http.post("/api/v1/transaction", json={
        "operations": [ack_op(message, lease=False)], "requiredLeases": [body["leaseId"]]})
    assert r.json()["success"] is True


async def test_an_op_without_a_lease_in_a_bundle_of_two_leases_is_checked_against_none(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    """Two required leases lend nothing: the op is lease-less, as a plain ack without a
    leaseId is (it used to be checked against whoever held the partition, here a lease
    that has run out)."""
    await push_items(http, queue_name, ["in0"])
    body = await pop_json(http, queue_name)
    assert body is not None
    await expire_leases_of(db, queue_name)
    r = await http.post("/api/v1/transaction", json={
        "operations": [ack_op(body["messages"][0], lease=False)],
        "requiredLeases": [body["leaseId"], "another-lease"]})
    assert r.json()["success"] is True, r.text
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["worker_id"]) == (0, None)
