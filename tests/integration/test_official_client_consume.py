"""The official client (`queen-mq` 2.6) against the real broker, in each of its wire modes
(JSON, binary push plain and framed, framed pop: `tests.client_modes`).

Every consumer is bounded: `.limit(n)` (per worker), or an abort `asyncio.Event` set by the
handler once it has seen what it waits for, with a short long-poll timeout so workers notice
the signal; every consume and pop is also under `asyncio.wait_for`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from queen import Queen

from tests.client_modes import CLIENT_MODES, official_client
from tests.support import BrokerProcess, cursor_row, fetch_records

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all

POLL_MS = 1000  # long-poll timeout of consumers: how quickly they notice the abort signal
BOUND = 30  # seconds any consume or pop may take before the test fails


@pytest.fixture(params=list(CLIENT_MODES))
async def client(broker: BrokerProcess, request: pytest.FixtureRequest) -> AsyncIterator[Queen]:
    async with official_client(broker.url, request.param) as queen:
        yield queen


async def push(client: Queen, queue: str, payloads: list[Any], partition: str = "Default",
               prefix: str | None = None) -> None:
    builder = client.queue(queue).partition(partition)
    items = [{"data": p, **({"transactionId": f"{prefix}{i}"} if prefix else {})}
             for i, p in enumerate(payloads)]
    answer = await builder.push(items)
    assert [e["status"] for e in answer] == ["queued"] * len(payloads)


async def consume_until(builder: Any, handler: Any, done: asyncio.Event) -> None:
    await asyncio.wait_for(builder.timeout_millis(POLL_MS).consume(handler, signal=done), BOUND)


@pytest.mark.citus  # the suite's smoke of this module on Citus
async def test_pop_without_wait_answers_at_once_and_ack_commits(
        client: Queen, db: asyncpg.Connection, queue_name: str) -> None:
    assert await asyncio.wait_for(client.queue(queue_name).wait(False).pop(), 5) == []
    await push(client, queue_name, [{"n": 1}, {"n": 2}, {"n": 3}])
    messages = await asyncio.wait_for(client.queue(queue_name).batch(3).wait(False).pop(), 5)
    assert [m["data"] for m in messages] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert len({m["leaseId"] for m in messages}) == 1
    result = await client.ack(messages, True)
    assert result["success"] is True
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["worker_id"]) == (2, None)
    single = await client.queue(queue_name).wait(False).pop()
    assert single == []


async def test_pop_with_wait_returns_a_message_pushed_while_it_is_parked(
        client: Queen, queue_name: str) -> None:
    await push(client, queue_name, ["seed"])
    await client.queue(queue_name).commit_on_delivery().wait(False).pop()
    parked = asyncio.create_task(client.queue(queue_name).timeout_millis(8000).pop())
    await asyncio.sleep(0.3)
    assert not parked.done()
    await push(client, queue_name, ["late"])
    messages = await asyncio.wait_for(parked, 10)
    assert [m["data"] for m in messages] == ["late"]
    ack = await client.ack(messages[0], True)
    assert ack["success"] is True and ack["leaseReleased"] is True


async def test_commit_on_delivery_pop_is_never_redelivered(
        client: Queen, db: asyncpg.Connection, queue_name: str) -> None:
    await push(client, queue_name, ["a", "b"])
    got = await client.queue(queue_name).group("g").batch(5).commit_on_delivery().wait(False).pop()
    assert [m["data"] for m in got] == ["a", "b"] and got[0]["leaseId"] == ""
    assert (await cursor_row(db, queue_name, "g"))["committed"] == 1  # type: ignore[index]
    assert await client.queue(queue_name).group("g").wait(False).pop() == []


async def test_consume_with_batch_hands_lists_and_auto_acks_them(
        client: Queen, db: asyncpg.Connection, queue_name: str) -> None:
    await push(client, queue_name, list(range(10)))
    calls: list[list[int]] = []

    async def handler(messages: list[dict[str, Any]]) -> None:
        calls.append([m["data"] for m in messages])

    await asyncio.wait_for(
        client.queue(queue_name).batch(5).limit(10).timeout_millis(POLL_MS).consume(handler),
        BOUND)
    assert calls == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["worker_id"]) == (9, None)


async def test_consume_with_concurrency_10_and_each_keeps_every_partition_in_order(
        client: Queen, db: asyncpg.Connection, queue_name: str) -> None:
    partitions, per = 5, 8
    for p in range(partitions):
        await push(client, queue_name, [{"p": p, "i": i} for i in range(per)], partition=f"P{p}")
    seen: dict[int, list[int]] = {p: [] for p in range(partitions)}
    done = asyncio.Event()

    async def handler(message: dict[str, Any]) -> None:
        assert isinstance(message, dict)
        seen[message["data"]["p"]].append(message["data"]["i"])
        await asyncio.sleep(0.005)  # let the other workers interleave
        if sum(map(len, seen.values())) == partitions * per:
            done.set()

    await consume_until(client.queue(queue_name).group("g").concurrency(10).batch(4).each(),
                        handler, done)
    assert seen == {p: list(range(per)) for p in range(partitions)}
    for p in range(partitions):
        row = await cursor_row(db, queue_name, "g", f"P{p}")
        assert row is not None and row["committed"] == per - 1


async def test_two_groups_each_receive_every_message(
        client: Queen, queue_name: str) -> None:
    await push(client, queue_name, [f"m{i}" for i in range(6)])
    received: dict[str, list[str]] = {"billing": [], "audit": []}

    async def run(group: str) -> None:
        done = asyncio.Event()

        async def handler(message: Any) -> None:
            batch = message if isinstance(message, list) else [message]
            received[group] += [m["data"] for m in batch]
            assert {m["consumerGroup"] for m in batch} == {group}
            if len(received[group]) >= 6:
                done.set()

        await consume_until(client.queue(queue_name).group(group).batch(4), handler, done)

    await asyncio.gather(run("billing"), run("audit"))
    assert received == {"billing": [f"m{i}" for i in range(6)],
                        "audit": [f"m{i}" for i in range(6)]}


async def test_partitions_3_delivers_three_partitions_in_one_batch_under_one_lease(
        client: Queen, db: asyncpg.Connection, queue_name: str) -> None:
    for p in ("A", "B", "C"):
        await push(client, queue_name, [p], partition=p)
    batches: list[list[dict[str, Any]]] = []

    async def handler(messages: list[dict[str, Any]]) -> None:
        batches.append(list(messages))

    await asyncio.wait_for(client.queue(queue_name).group("g").partitions(3).batch(10).limit(3)
                           .timeout_millis(POLL_MS).consume(handler), BOUND)
    assert len(batches) == 1
    [batch] = batches
    assert sorted(m["data"] for m in batch) == ["A", "B", "C"]
    assert len({m["partitionId"] for m in batch}) == 3
    assert len({m["leaseId"] for m in batch}) == 1
    for p in ("A", "B", "C"):  # one /ack/batch committed all three partitions
        row = await cursor_row(db, queue_name, "g", p)
        assert row is not None and (row["committed"], row["worker_id"]) == (0, None)


@pytest.mark.parametrize("renew", [True, False])
async def test_renew_lease_keeps_a_slow_handler_ack_valid(
        client: Queen, db: asyncpg.Connection, queue_name: str, renew: bool) -> None:
    """Lease 1 s, handler 1.6 s: with renewal (every 300 ms, extend without body) the ack
    carrying the leaseId is accepted; without it the lease has expired and the ack is
    refused, so the message stays uncommitted (the control proves the renewal mattered)."""
    created = await client.queue(queue_name).config({"lease_time": 1}).create()
    assert created["options"]["leaseTime"] == 1
    await push(client, queue_name, ["slow"])

    async def handler(message: dict[str, Any]) -> None:
        await asyncio.sleep(1.6)

    builder = client.queue(queue_name).batch(1).limit(1).timeout_millis(POLL_MS)
    if renew:
        builder = builder.renew_lease(True, 300)
    await asyncio.wait_for(builder.consume(handler), BOUND)
    row = await cursor_row(db, queue_name)
    assert row is not None
    assert row["committed"] == (0 if renew else -1)


async def test_raising_handler_is_redelivered_until_retry_limit_then_lands_in_dlq(
        client: Queen, db: asyncpg.Connection, queue_name: str) -> None:
    await client.queue(queue_name).config({"retry_limit": 2}).create()
    await push(client, queue_name, [{"order": 7}], prefix="poison-")
    attempts: list[str] = []
    done = asyncio.Event()

    async def handler(message: dict[str, Any]) -> None:
        attempts.append(message["transactionId"])
        if len(attempts) == 3:
            done.set()  # checked by the worker after this nack
        raise ValueError(f"boom {len(attempts)}")

    await consume_until(client.queue(queue_name).group("g").batch(1), handler, done)
    assert attempts == ["poison-0"] * 3  # first delivery + retryLimit redeliveries
    assert await client.queue(queue_name).group("g").wait(False).pop() == []
    listing = await client.queue(queue_name).dlq("g").get()
    assert listing["total"] == 1
    [dead] = listing["messages"]
    assert dead["data"] == {"order": 7}
    assert "boom 3" in dead["errorMessage"]
    assert (dead["transactionId"], dead["consumerGroup"], dead["queue"]) == (
        "poison-0", "g", queue_name)
    assert (await client.queue(queue_name).dlq("other").get())["total"] == 0
    # DLQ retry route: the stored copy is pushed again under a fresh transactionId.
    replay = await client.admin.retry_message(dead["partitionId"], "poison-0")
    assert (replay["success"], replay["result"], replay["dlqRowRemoved"]) == (
        True, "moved", True)
    assert replay["replayedAs"]["transaction_id"] != "poison-0"
    assert (await client.queue(queue_name).dlq("g").get())["total"] == 0
    again = await client.queue(queue_name).group("g").wait(False).pop()
    assert [m["data"] for m in again] == [{"order": 7}]
    assert again[0]["transactionId"] == replay["replayedAs"]["transaction_id"]
    with pytest.raises(Exception, match="404|not found|Not Found"):
        await client.admin.retry_message(dead["partitionId"], "poison-0")


async def test_transaction_pushes_and_acks_atomically(
        client: Queen, db: asyncpg.Connection, queue_name: str, http: httpx.AsyncClient) -> None:
    out = queue_name + "-out"
    await push(client, queue_name, [{"step": 1}])
    [message] = await client.queue(queue_name).group("g").wait(False).pop()
    result = await (client.transaction().queue(out).push([{"data": {"step": 2}}])
                    .ack(message, "completed", {"consumer_group": "g"}).commit())
    assert result["success"] is True
    assert [e["type"] for e in result["results"]] == ["push", "ack"]
    row = await cursor_row(db, queue_name, "g")
    assert row is not None and (row["committed"], row["worker_id"]) == (0, None)
    assert [r["payload"] for r in (await fetch_records(http, out))["records"]] == [{"step": 2}]
    # Replaying the same bundle now fails (the lease is gone) and pushes nothing.
    with pytest.raises(Exception, match="lease"):
        await (client.transaction().queue(out).push([{"data": {"step": 3}}])
               .ack(message, "completed", {"consumer_group": "g"}).commit())
    assert len((await fetch_records(http, out))["records"]) == 1


async def test_namespace_and_task_consumer_reads_every_matching_queue(
        client: Queen) -> None:
    ns = "cns" + uuid.uuid4().hex[:8]
    await push(client, f"{ns}.work.a", ["a"])
    await push(client, f"{ns}.work.b", ["b"])
    await push(client, f"{ns}.rest.c", ["c"])
    got: list[str] = []
    done = asyncio.Event()

    async def handler(message: Any) -> None:
        batch = message if isinstance(message, list) else [message]
        got.extend(m["data"] for m in batch)
        if len(got) >= 2:
            done.set()

    await consume_until(client.queue().namespace(ns).task("work").group("g"), handler, done)
    assert sorted(got) == ["a", "b"]
    only_task = await client.queue().task("rest").namespace(ns).batch(5).wait(False).pop()
    assert [m["data"] for m in only_task] == ["c"]


async def test_subscription_new_sees_only_later_messages_and_all_sees_the_backlog(
        client: Queen, queue_name: str) -> None:
    await push(client, queue_name, ["old0", "old1"])
    fresh = client.queue(queue_name).group("fresh").subscription_mode("new").batch(10)
    assert await fresh.wait(False).pop() == []
    await push(client, queue_name, ["new0"])
    assert [m["data"] for m in await fresh.wait(False).pop()] == ["new0"]
    everything = client.queue(queue_name).group("all").subscription_mode("all").batch(10)
    assert [m["data"] for m in await everything.wait(False).pop()] == ["old0", "old1", "new0"]


async def test_seek_moves_a_group_back_to_a_timestamp_and_to_the_end(
        client: Queen, queue_name: str) -> None:
    await push(client, queue_name, ["a", "b", "c"])
    group = client.queue(queue_name).group("g").batch(10)
    first = await group.wait(False).pop()
    assert (await client.ack(first, True, {"group": "g"}))["success"] is True
    assert await group.wait(False).pop() == []
    answer = await client.admin.seek_consumer_group("g", queue_name,
                                                    {"timestamp": "2000-01-01T00:00:00Z"})
    assert answer["success"] is True
    again = await group.wait(False).pop()
    assert [m["data"] for m in again] == ["a", "b", "c"]
    # Seeking releases the live lease; to the end skips everything present.
    answer = await client.admin.seek_consumer_group("g", queue_name, {"toEnd": True})
    assert answer["success"] is True
    assert await group.wait(False).pop() == []
    await push(client, queue_name, ["d"])
    assert [m["data"] for m in await group.wait(False).pop()] == ["d"]
