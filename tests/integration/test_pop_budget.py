"""A pop's answer keeps within its byte budget (QUEEN_POP_MAX_BYTES;
schema/functions/30_pop.sql, queen.pop_ready): the segments delivered stop where their
bytes pass it, the cursor is cut there in the same transaction (a lease ends at the cut,
autoAck commits only up to it), and the rest is delivered by the next pop at once. A first
message larger than the budget goes out alone. Before, a pop delivered its whole batch
whatever the bytes: 40 messages of 4 MiB made one answer of 160 MB, and a worker grew by
600 MB building it."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import asyncpg
import httpx
import pytest
from queen.http.pop_frames import decode_pop_frames

from tests.support import ANSWER_BUDGET, cursor_row

pytestmark = pytest.mark.citus

BUDGET = ANSWER_BUDGET
SIZE = 100_000  # a payload's bytes (incompressible text): about ten fit in the budget
COUNT = 24


@pytest.fixture
def client(budget_client: httpx.AsyncClient) -> httpx.AsyncClient:
    return budget_client  # the session's broker with 1 MiB budgets (tests/conftest.py)


def _payload(size: int) -> dict[str, str]:
    return {"b": base64.b64encode(os.urandom(size * 3 // 4)).decode()}


async def _push(client: httpx.AsyncClient, queue: str, count: int, size: int, *,
                per_push: int, partition: str = "p") -> list[str]:
    """`count` messages of about `size` bytes, `per_push` in each push (a push is a segment
    here: one client, one push at a time)."""
    txids = [f"{partition}-{i}" for i in range(count)]
    for at in range(0, count, per_push):
        r = await client.post("/api/v1/push", json={"items": [
            {"queue": queue, "partition": partition, "payload": _payload(size),
             "transactionId": t} for t in txids[at:at + per_push]]})
        assert r.status_code == 201, r.text
    return txids


async def _pop(client: httpx.AsyncClient, queue: str, *, framed: bool, auto_ack: bool,
               **params: str) -> list[dict[str, Any]]:
    r = await client.get(f"/api/v1/pop/queue/{queue}", params={
        "wait": "false", "consumerGroup": "g", "batch": "100",
        "autoAck": str(auto_ack).lower(), "frames": str(framed).lower(), **params})
    assert r.status_code in (200, 204), r.text
    if r.status_code == 204:
        return []
    answer = decode_pop_frames(r.content) if framed else r.json()
    return list(answer["messages"])


async def _ack(client: httpx.AsyncClient, messages: list[dict[str, Any]]) -> None:
    r = await client.post("/api/v1/ack/batch", json={"consumerGroup": "g", "acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "leaseId": m["leaseId"], "status": "completed"} for m in messages]})
    assert r.status_code == 200 and all(a["success"] for a in r.json()), r.text


def _data_bytes(messages: list[dict[str, Any]]) -> int:
    return sum(len(json.dumps(m["data"])) for m in messages)


@pytest.mark.parametrize("per_push", [1, COUNT], ids=["segment-each", "one-segment"])
@pytest.mark.parametrize("framed", [False, True], ids=["json", "framed"])
@pytest.mark.parametrize("auto_ack", [False, True], ids=["leased", "autoAck"])
async def test_a_pop_delivers_a_prefix_within_the_budget_and_the_next_pop_the_rest(
        client: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str,
        auto_ack: bool, framed: bool, per_push: int) -> None:
    txids = await _push(client, queue_name, COUNT, SIZE, per_push=per_push)
    seen: list[str] = []
    pops = 0
    while True:
        got = await _pop(client, queue_name, framed=framed, auto_ack=auto_ack)
        if not got:
            break
        pops += 1
        assert pops <= COUNT, "no progress"
        # A prefix, within the budget, and no crumb of it: several messages fit.
        assert min(5, COUNT - len(seen)) <= len(got) < COUNT
        assert _data_bytes(got) <= BUDGET
        assert [m["transactionId"] for m in got] == txids[len(seen):len(seen) + len(got)]
        seen += [m["transactionId"] for m in got]
        row = await cursor_row(db, queue_name, "g", "p")
        assert row is not None
        if auto_ack:  # committed only what went out
            assert (row["committed"], row["worker_id"]) == (len(seen) - 1, None)
        else:  # leased only what went out, then acked: the next pop takes the rest at once
            assert (row["committed"], row["batch_end"], row["lease_live"]) == (
                len(seen) - len(got) - 1, len(seen) - 1, True)
            await _ack(client, got)
    assert pops >= 2  # the budget cut the first pop (the whole lot is over twice the budget)
    assert seen == txids  # everything, once each, in order
    row = await cursor_row(db, queue_name, "g", "p")
    assert row is not None
    assert (row["committed"], row["worker_id"]) == (COUNT - 1, None)  # lag 0


@pytest.mark.parametrize("per_push", [1, 3], ids=["segment-each", "one-segment"])
@pytest.mark.parametrize("framed", [False, True], ids=["json", "framed"])
async def test_a_message_larger_than_the_budget_is_delivered_alone(
        client: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str,
        framed: bool, per_push: int) -> None:
    txids = await _push(client, queue_name, 3, BUDGET * 3 // 2, per_push=per_push)
    for n, txid in enumerate(txids):
        got = await _pop(client, queue_name, framed=framed, auto_ack=False)
        assert [m["transactionId"] for m in got] == [txid]
        assert _data_bytes(got) > BUDGET
        row = await cursor_row(db, queue_name, "g", "p")
        assert row is not None and (row["committed"], row["batch_end"]) == (n - 1, n)
        await _ack(client, got)
    assert await _pop(client, queue_name, framed=framed, auto_ack=False) == []


async def _on_two_shards(db: asyncpg.Connection, deployment: str, queue: str) -> bool:
    if deployment != "citus":
        return False
    return bool(await db.fetchval(
        "SELECT count(DISTINCT get_shard_id_for_distribution_column("
        "'queen.log_partitions', p.id)) > 1 FROM queen.log_partitions p"
        " JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1", queue))


async def test_a_partition_the_budget_left_out_is_released_for_the_next_pop(
        client: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str,
        deployment: str) -> None:
    """A pop of two partitions whose messages do not fit together: it delivers one, the
    other's claim is undone (no lease held on it), and a second pop, without any ack, gets
    it at once."""
    for partition in ("a", "b"):
        await _push(client, queue_name, 1, BUDGET * 2 // 3, per_push=1, partition=partition)
    first = await _pop(client, queue_name, framed=False, auto_ack=False, partitions="2")
    if await _on_two_shards(db, deployment, queue_name):
        # Citus placed them on two shards: the pop claims them in a statement per shard,
        # and a later statement still delivers one message, so the answer passes the
        # budget by that one message at most (docs/guide/consuming.md) and is full.
        assert len(first) == 2 and _data_bytes(first[:1]) <= BUDGET
        await _ack(client, first)
        assert await _pop(client, queue_name, framed=False, auto_ack=False,
                          partitions="2") == []
        return
    assert len(first) == 1
    other = "b" if first[0]["partition"] == "a" else "a"
    row = await cursor_row(db, queue_name, "g", other)
    assert row is None or (row["committed"], row["worker_id"], row["batch_end"]) == (
        -1, None, None)
    second = await _pop(client, queue_name, framed=False, auto_ack=False, partitions="2")
    assert [m["partition"] for m in second] == [other]
    await _ack(client, first + second)
    assert await _pop(client, queue_name, framed=False, auto_ack=False, partitions="2") == []


async def test_the_budget_counts_bytes_uncompressed(
        client: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    """Payloads that zstd shrinks a thousandfold: stored, all 24 fit in the budget many times
    over; as they go out (what the worker builds) they do not. The append records each
    segment's uncompressed size from its zstd header."""
    r = await client.post("/api/v1/push", json={"items": [
        {"queue": queue_name, "partition": "p", "payload": {"b": "x" * SIZE},
         "transactionId": f"p-{i}"} for i in range(COUNT)]})
    assert r.status_code == 201, r.text
    (raw, stored) = await db.fetchrow(
        "SELECT sum(s.raw_bytes), sum(octet_length(s.blob)) FROM queen.log_segments s"
        " JOIN queen.log_partitions p ON p.id = s.partition_id"
        " JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1", queue_name)
    assert raw > COUNT * SIZE > BUDGET > 100 * stored
    got = await _pop(client, queue_name, framed=False, auto_ack=True)
    assert 5 <= len(got) < COUNT and _data_bytes(got) <= BUDGET


async def test_the_previous_versions_call_still_pops_during_a_rolling_upgrade(
        client: httpx.AsyncClient, database_url: str, deployment: str) -> None:
    """A broker of the version before the budget calls queen.pop_ready without its last
    argument until it is replaced (docs/operating/upgrades.md): that signature still claims
    and answers the segments. (On one PostgreSQL: the call's route is then null.)"""
    if deployment == "citus":
        pytest.skip("the signature is the same on Citus; the call here has no route")
    queue = "upgrade-" + os.urandom(4).hex()
    r = await client.post("/api/v1/push", json={"items": [
        {"queue": queue, "payload": {"n": n}} for n in range(3)]})
    assert r.status_code == 201, r.text
    partition_id = int(r.json()[0]["partition_id"])
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT verdict, span_start, span_end FROM queen.pop_ready("
            "NULL, '', $1, NULL, NULL, NULL, '__QUEUE_MODE__', false, 'all', NULL, false,"
            " 10, 1, true, 0, 300, '', $2::bigint[], false, 1)",
            queue, [partition_id])
    finally:
        await conn.close()
    took = [r for r in rows if r["verdict"] == "took"]
    assert took and (took[0]["span_start"], took[0]["span_end"]) == (0, 2), rows
