"""An ack whose transactionId names no message of its partition (docs/acks.md): refused with
Queen's `unresolvable:` text whatever its status, nothing charged, the lease it names left as
it was; inside a transaction it rolls the bundle back (`reason: ack_rejected`). Each test
checks the cursor row and the DLQ, not only the answer, and the official client's reading.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import httpx
import pytest
from queen import Queen

from core.storage.database import Database
from core.upkeep import maintenance
from tests.support import (
    BrokerProcess,
    configure,
    cursor_row,
    dlq_rows,
    expire_leases_of,
    fetch_records,
    pop_json,
    prune_index_of,
    push_items,
    queue_counts,
)

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all

UNRESOLVABLE = ("unresolvable: transaction not in the ack window (hash purged or never "
                "pushed); if leased, the message redelivers")
STATUSES = ["completed", "failed", "retry", "dlq"]


def ghost(message: dict[str, Any], txid: str = "never-pushed") -> dict[str, Any]:
    """The message with a transactionId nobody pushed (same partition, same lease)."""
    return {**message, "transactionId": txid}


def ack_item(message: dict[str, Any], status: str) -> dict[str, Any]:
    return {"transactionId": message["transactionId"], "partitionId": message["partitionId"],
            "leaseId": message["leaseId"], "status": status, "error": "boom"}


async def lease_state(db: asyncpg.Connection, queue: str) -> tuple[Any, ...]:
    row = await cursor_row(db, queue)
    assert row is not None
    return (row["committed"], row["batch_end"], row["worker_id"], row["lease_expires_at"],
            row["retry_count"])


@pytest.mark.parametrize("status", STATUSES)
async def test_single_ack_of_an_unknown_id_is_refused_and_charges_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, status: str) -> None:
    # retryLimit 0: a failed ack that were charged would dead-letter at once.
    await configure(http, queue_name, retryLimit=0, retryDelay=0)
    await push_items(http, queue_name, ["a", "b"])
    body = await pop_json(http, queue_name, batch=2)
    assert body is not None
    before = await lease_state(db, queue_name)
    r = await http.post("/api/v1/ack", json=ack_item(ghost(body["messages"][0]), status))
    assert r.status_code == 200
    assert r.json() == [{"index": 0, "transactionId": "never-pushed", "success": False,
                         "error": UNRESOLVABLE, "leaseReleased": False, "dlq": False}]
    assert await lease_state(db, queue_name) == before  # not released, not shortened
    assert await dlq_rows(db, queue_name) == []
    # The real batch still acks under its lease.
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [
        ack_item(m, "completed") for m in body["messages"]]})
    assert [i["success"] for i in r.json()] == [True, True]
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["worker_id"]) == (1, None)


async def test_batch_refuses_only_its_unknown_items_and_the_others_apply(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    """A batch is applied per item (§4.6): one unknown id does not hold back the rest."""
    await configure(http, queue_name, retryLimit=0, retryDelay=0)
    await push_items(http, queue_name, ["a", "b", "c"])
    body = await pop_json(http, queue_name, batch=3)
    assert body is not None
    m0, m1, _ = body["messages"]
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [
        ack_item(m0, "completed"), ack_item(ghost(m1, "ghost-1"), "dlq"),
        ack_item(ghost(m1, "ghost-2"), "failed"), ack_item(m1, "completed")]})
    assert r.status_code == 200
    answer = r.json()
    assert [(i["success"], i["error"], i["leaseReleased"], i["dlq"]) for i in answer] == [
        (True, None, False, False), (False, UNRESOLVABLE, False, False),
        (False, UNRESOLVABLE, False, False), (True, None, False, False)]
    row = await cursor_row(db, queue_name)
    assert row is not None
    # Committed through b; c is still leased to the same holder, nothing dead-lettered.
    assert (row["committed"], row["worker_id"], row["retry_count"]) == (1, body["leaseId"], 0)
    assert await dlq_rows(db, queue_name) == []


async def test_an_unknown_id_is_unresolvable_whatever_the_lease_it_names(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["a"])
    body = await pop_json(http, queue_name)
    assert body is not None
    await expire_leases_of(db, queue_name)
    [message] = body["messages"]
    for item in (ack_item(ghost(message), "completed"),
                 {**ack_item(ghost(message), "failed"), "leaseId": "somebody-else"}):
        r = await http.post("/api/v1/ack", json=item)
        assert r.json()[0]["error"] == UNRESOLVABLE
    r = await http.post("/api/v1/ack", json=ack_item(message, "completed"))
    assert r.json()[0]["error"] == "invalid or expired lease"


async def test_official_client_reports_an_unresolvable_ack_as_a_failure(
        broker: BrokerProcess, db: asyncpg.Connection, queue_name: str) -> None:
    async with Queen(broker.url) as client:
        await client.queue(queue_name).push([{"data": "a"}, {"data": "b"}])
        messages = await client.queue(queue_name).batch(2).wait(False).pop()
        assert len(messages) == 2
        single = await client.ack(ghost(messages[0]), False)
        assert single == {"success": False, "error": UNRESOLVABLE}
        batch = await client.ack([messages[0], ghost(messages[1])], True)
        assert batch["success"] is False and batch["error"] == UNRESOLVABLE
        assert [i["success"] for i in batch["results"]] == [True, False]
        rest = await client.ack(messages[1], True)
        assert rest["success"] is True and rest["leaseReleased"] is True
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["worker_id"]) == (1, None)


async def test_official_consumer_survives_an_unresolvable_ack_and_the_message_redelivers(
        broker: BrokerProcess, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    """consume() logs a refused ack and goes on; the lease it named runs out and the
    message comes back (`if leased, the message redelivers`), then acks for real."""
    seen: list[str] = []

    async def handler(message: dict[str, Any]) -> None:
        seen.append(message["data"])
        if len(seen) == 1:
            message["transactionId"] = "gone-before-the-ack"  # what the ack will name

    await configure(http, queue_name, leaseTime=1, retryDelay=0)
    async with Queen(broker.url) as client:
        await client.queue(queue_name).push([{"data": "only"}])
        consumer = client.queue(queue_name).batch(1).timeout_millis(500).limit(2)
        await asyncio.wait_for(consumer.consume(handler), 30)
    assert seen == ["only", "only"]
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["worker_id"]) == (0, None)


async def test_an_id_gone_with_retention_is_unresolvable(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    await configure(http, queue_name, retentionSeconds=60, retentionEnabled=True)
    await push_items(http, queue_name, ["old"])
    await push_items(http, queue_name, ["new"], prefix="n")
    body = await pop_json(http, queue_name)
    assert body is not None and body["messages"][0]["data"] == "old"
    await db.execute(
        # (Shifted in UTC: Citus pushes only immutable arithmetic on a column down.)
        """UPDATE queen.log_segments s
              SET created_at = ((s.created_at AT TIME ZONE 'UTC') - interval '2 min')
                               AT TIME ZONE 'UTC'
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
            WHERE s.partition_id = p.id AND q.name = $1 AND s.base_offset = 0""", queue_name)
    await maintenance.apply_retention(core_db, segment_batch=100)
    assert (await fetch_records(http, queue_name)).get("logStartOffset") == 1
    r = await http.post("/api/v1/ack", json=ack_item(body["messages"][0], "completed"))
    assert r.json()[0]["error"] == UNRESOLVABLE
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["worker_id"]) == (-1, body["leaseId"])


async def test_an_unknown_id_is_unresolvable_also_where_the_segments_are_searched(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    """The reaper pruned the index rows of the leased messages: the ack searches their
    segments, finds nothing, and answers as the index would have."""
    await push_items(http, queue_name, ["a", "b"])
    await prune_index_of(db, core_db, queue_name)
    body = await pop_json(http, queue_name, batch=2)
    assert body is not None
    before = await lease_state(db, queue_name)
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [
        ack_item(ghost(body["messages"][0]), "failed"), ack_item(body["messages"][0], "retry")]})
    refused, retried = r.json()
    assert (refused["success"], refused["error"]) == (False, UNRESOLVABLE)
    assert retried["success"] is True  # found in its segment: the retry releases
    assert (await lease_state(db, queue_name))[:3] == (before[0], None, None)


async def test_transaction_with_an_unknown_id_rolls_back_with_ack_rejected(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    out = queue_name + "-out"
    await push_items(http, queue_name, ["a"])
    body = await pop_json(http, queue_name)
    assert body is not None
    message = body["messages"][0]
    op = {"type": "ack", "transactionId": message["transactionId"],
          "partitionId": message["partitionId"], "status": "completed",
          "leaseId": message["leaseId"]}
    r = await http.post("/api/v1/transaction", json={
        "operations": [{"type": "push", "items": [{"queue": out, "payload": 1}]}, op,
                       {**op, "transactionId": "ghost", "status": "dlq"}],
        "requiredLeases": [message["leaseId"]]})
    assert r.status_code == 200
    answer = r.json()
    assert (answer["success"], answer["reason"], answer["results"]) == (
        False, "ack_rejected", [])
    assert answer["error"] == (
        f"ack of transactionId 'ghost' (partitionId {message['partitionId']}, consumer group "
        f"'__QUEUE_MODE__') rejected: {UNRESOLVABLE}; transaction rolled back")
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["worker_id"]) == (-1, body["leaseId"])
    assert (await queue_counts(db, out))["segments"] == 0
    assert await dlq_rows(db, queue_name) == []


async def test_official_client_transaction_with_an_unknown_id_raises_its_error(
        broker: BrokerProcess, db: asyncpg.Connection, queue_name: str) -> None:
    async with Queen(broker.url) as client:
        await client.queue(queue_name).push([{"data": "a"}])
        [message] = await client.queue(queue_name).wait(False).pop()
        with pytest.raises(Exception, match="^ack of transactionId 'ghost' .*unresolvable: "
                           "transaction not in the ack window .*; transaction rolled back$"):
            await client.transaction().ack([message, ghost(message, "ghost")]).commit()
        # Nothing applied: the real message still acks under its lease.
        assert (await client.ack(message, True))["success"] is True
    row = await cursor_row(db, queue_name)
    assert row is not None and row["committed"] == 0
