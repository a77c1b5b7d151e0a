"""The ack of a whole delivery (core/engine/ack_spans.py): a pop's acks that come back whole
to the process that answered the pop are applied by `queen.ack_spans`, and answer exactly
what `queen.ack` answers for the same acks.

Two brokers of one web worker each share a database: `here` answers the pops, and each
scenario runs on two queues set up alike, one acknowledged through `here` (which remembers
what it delivered) and one through `there` (which does not, as another web worker behind
the same port would not): answers, cursors and what the next pop gets must be the same. The
database counts the calls of both functions (`track_functions`), which says which path an
ack took; each broker has one pooled connection, so the calls of one ack are counted by one
backend and appear together.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support import (
    BrokerProcess,
    configure,
    create_database,
    cursor_row,
    expire_leases_of,
    pop_json,
    push_items,
    wait_for,
)

CURSOR_FIELDS = ("committed", "batch_end", "worker_id", "retry_count", "total_consumed",
                 "not_before", "lease_live")


@pytest.fixture(scope="module")
def counted_database(pg_server_url: str) -> str:
    async def make() -> str:
        url = await create_database(pg_server_url)
        conn = await asyncpg.connect(url)
        try:
            name = await conn.fetchval("SELECT current_database()")
            await conn.execute(f'ALTER DATABASE "{name}" SET track_functions = \'pl\'')
        finally:
            await conn.close()
        return url

    return asyncio.run(make())


@pytest.fixture(scope="module")
def here_broker(counted_database: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(counted_database, workers=1, env={"DB_POOL_SIZE": "1"}) as proc:
        yield proc


@pytest.fixture(scope="module")
def there_broker(counted_database: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(counted_database, workers=1, env={"DB_POOL_SIZE": "1"}) as proc:
        yield proc


@pytest.fixture
async def here(here_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=here_broker.url, timeout=30) as client:
        yield client


@pytest.fixture
async def there(there_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=there_broker.url, timeout=30) as client:
        yield client


@pytest.fixture
async def counted(counted_database: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(counted_database)
    try:
        yield conn
    finally:
        await conn.close()


async def calls(db: asyncpg.Connection) -> tuple[int, int]:
    """(calls of queen.ack_spans, calls of queen.ack) the database has counted."""
    await db.execute("SELECT pg_stat_clear_snapshot()")
    rows = {r["funcname"]: r["calls"] for r in await db.fetch(
        """SELECT funcname, calls FROM pg_stat_user_functions
            WHERE schemaname = 'queen' AND funcname IN ('ack', 'ack_spans')""")}
    return rows.get("ack_spans", 0), rows.get("ack", 0)


async def counted_calls(db: asyncpg.Connection, before: tuple[int, int],
                        expected: tuple[int, int]) -> None:
    """Wait until the calls since `before` are `expected` (a backend reports its counts
    within a second of going idle)."""
    async def reached() -> bool:
        now = await calls(db)
        return (now[0] - before[0], now[1] - before[1]) == expected

    try:
        await wait_for(reached, timeout=5)
    except AssertionError:
        now = await calls(db)
        raise AssertionError(f"calls (ack_spans, ack) {now[0] - before[0], now[1] - before[1]}"
                             f", expected {expected}") from None


async def ack_batch(http: httpx.AsyncClient, items: list[dict[str, Any]],
                    group: str | None = None) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"acknowledgments": items}
    if group is not None:
        body["consumerGroup"] = group
    r = await http.post("/api/v1/ack/batch", json=body)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def acks_of(messages: list[dict[str, Any]], status: str = "completed") -> list[dict[str, Any]]:
    return [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
             "leaseId": m["leaseId"], "status": status} for m in messages]


async def cursor(db: asyncpg.Connection, queue: str, group: str | None) -> dict[str, Any]:
    row = await cursor_row(db, queue, group or "__QUEUE_MODE__")
    assert row is not None
    out = {k: row[k] for k in CURSOR_FIELDS}
    # The lease id differs from queue to queue; that one is held, and by which pop, is not.
    out["worker_id"] = row["worker_id"] is not None
    out["consumed_at_set"] = row["last_consumed_at"] is not None
    return out


async def twin_queues(http: httpx.AsyncClient, base: str, payloads: list[Any], *,
                      dedup: bool = True, ids: list[str] | None = None) -> tuple[str, str]:
    """Two queues set up alike (the same messages, the same transactionIds)."""
    names = (base + "-here", base + "-there")
    for name in names:
        await configure(http, name, dedupWindowSeconds=3600 if dedup else 0,
                        retryLimit=3, retryDelay=0, leaseTime=60)
        if ids is None:
            await push_items(http, name, payloads)
        else:
            r = await http.post("/api/v1/push", json={"items": [
                {"queue": name, "payload": p, "transactionId": t}
                for p, t in zip(payloads, ids)]})
            assert r.status_code == 201, r.text
    return names


async def pop_both(here: httpx.AsyncClient, names: tuple[str, str], batch: int,
                   group: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Both queues popped through `here` (so it remembers both deliveries)."""
    extra = {"consumerGroup": group} if group else {}
    bodies = [await pop_json(here, name, batch=batch, **extra) for name in names]
    assert bodies[0] is not None and bodies[1] is not None
    return bodies[0]["messages"], bodies[1]["messages"]


async def same_after(db: asyncpg.Connection, here: httpx.AsyncClient,
                     names: tuple[str, str], group: str | None) -> dict[str, Any]:
    """The cursors of both queues and what a pop of each gets next, asserted equal."""
    states = [await cursor(db, name, group) for name in names]
    assert states[0] == states[1]
    extra = {"consumerGroup": group} if group else {}
    nexts = [await pop_json(here, name, batch=100, **extra) for name in names]
    datas = [None if b is None else [m["data"] for m in b["messages"]] for b in nexts]
    assert datas[0] == datas[1]
    return {"cursor": states[0], "next": datas[0]}


@pytest.mark.parametrize("group", [None, "g"], ids=["queue-mode", "group"])
async def test_a_whole_delivery_acked_where_it_was_popped_answers_as_the_general_path(
        here: httpx.AsyncClient, there: httpx.AsyncClient, counted: asyncpg.Connection,
        queue_name: str, group: str | None) -> None:
    names = await twin_queues(here, queue_name, list(range(12)))
    popped = await pop_both(here, names, 8, group)
    before = await calls(counted)
    fast = await ack_batch(here, acks_of(popped[0]), group)
    await counted_calls(counted, before, (1, 0))  # queen.ack_spans alone
    before = await calls(counted)
    general = await ack_batch(there, acks_of(popped[1]), group)
    await counted_calls(counted, before, (0, 1))  # another process: queen.ack
    assert fast == general
    assert [a["success"] and a["leaseReleased"] and not a["dlq"] for a in fast] == [True] * 8
    after = await same_after(counted, here, names, group)
    assert after["cursor"]["committed"] == 7 and after["cursor"]["total_consumed"] == 8
    assert after["cursor"]["worker_id"] is False  # released
    assert after["next"] == [8, 9, 10, 11]


async def test_a_single_ack_of_a_pop_of_one_is_a_whole_delivery(
        here: httpx.AsyncClient, there: httpx.AsyncClient, counted: asyncpg.Connection,
        queue_name: str) -> None:
    names = await twin_queues(here, queue_name, ["a", "b"])
    popped = await pop_both(here, names, 1)
    answers = []
    for client, messages, expected in ((here, popped[0], (1, 0)), (there, popped[1], (0, 1))):
        before = await calls(counted)
        r = await client.post("/api/v1/ack", json=acks_of(messages)[0])
        assert r.status_code == 200, r.text
        await counted_calls(counted, before, expected)
        answers.append(r.json())
    assert answers[0] == answers[1]
    assert (await same_after(counted, here, names, None))["next"] == ["b"]


async def test_a_forged_transaction_id_among_the_acks_takes_the_general_path(
        here: httpx.AsyncClient, there: httpx.AsyncClient, counted: asyncpg.Connection,
        queue_name: str) -> None:
    names = await twin_queues(here, queue_name, list(range(5)))
    popped = await pop_both(here, names, 5)
    answers = []
    for client, messages, expected in ((here, popped[0], (0, 1)), (there, popped[1], (0, 1))):
        items = acks_of(messages)
        items[2]["transactionId"] = "forged"
        before = await calls(counted)
        answers.append(await ack_batch(client, items))
        await counted_calls(counted, before, expected)
    assert answers[0] == answers[1]
    assert [a["success"] for a in answers[0]] == [True, True, False, True, True]
    assert answers[0][2]["error"].startswith("unresolvable")
    await same_after(counted, here, names, None)


async def test_a_stale_lease_moves_nothing(
        here: httpx.AsyncClient, there: httpx.AsyncClient, counted: asyncpg.Connection,
        queue_name: str) -> None:
    """The lease expired and another pop took the span under a lease of its own: the ack
    of the first delivery, which `here` still remembers, is refused whole."""
    names = await twin_queues(here, queue_name, list(range(4)))
    popped = await pop_both(here, names, 4)
    for name in names:
        await expire_leases_of(counted, name)
    again = await pop_both(there, names, 4)
    assert [m["data"] for m in again[0]] == [0, 1, 2, 3]
    answers = []
    # `here` tries queen.ack_spans, which applies nothing, then queen.ack.
    for client, messages, expected in ((here, popped[0], (1, 1)), (there, popped[1], (0, 1))):
        before = await calls(counted)
        answers.append(await ack_batch(client, acks_of(messages)))
        await counted_calls(counted, before, expected)
    assert answers[0] == answers[1]
    assert {(a["success"], a["error"]) for a in answers[0]} == {
        (False, "invalid or expired lease")}
    states = [await cursor(counted, name, None) for name in names]
    assert states[0] == states[1]
    assert states[0]["committed"] == -1 and states[0]["lease_live"] is True


async def test_a_partial_ack_then_the_whole_delivery_again(
        here: httpx.AsyncClient, there: httpx.AsyncClient, counted: asyncpg.Connection,
        queue_name: str) -> None:
    """The first half acked, then every item of the delivery: the cursor moved since the
    pop, so the second ack is the general path's (the first half answers noop)."""
    names = await twin_queues(here, queue_name, list(range(6)))
    popped = await pop_both(here, names, 6)
    answers = []
    # Both acks general on `there`; on `here` the second tries queen.ack_spans first.
    for client, messages, expected in ((here, popped[0], (1, 2)), (there, popped[1], (0, 2))):
        before = await calls(counted)
        first = await ack_batch(client, acks_of(messages[:3]))
        assert [a["success"] and not a["leaseReleased"] for a in first] == [True] * 3
        answers.append(await ack_batch(client, acks_of(messages)))
        await counted_calls(counted, before, expected)
    assert answers[0] == answers[1]
    assert [a.get("noop", False) for a in answers[0]] == [True] * 3 + [False] * 3
    assert all(a["success"] for a in answers[0])
    after = await same_after(counted, here, names, None)
    assert after["cursor"]["committed"] == 5 and after["next"] is None


async def test_a_partial_ack_then_the_rest(
        here: httpx.AsyncClient, there: httpx.AsyncClient, counted: asyncpg.Connection,
        queue_name: str) -> None:
    names = await twin_queues(here, queue_name, list(range(6)))
    popped = await pop_both(here, names, 6)
    answers = []
    for client, messages in ((here, popped[0]), (there, popped[1])):
        before = await calls(counted)
        answers.append(await ack_batch(client, acks_of(messages[:4]))
                       + await ack_batch(client, acks_of(messages[4:])))
        await counted_calls(counted, before, (0, 2))
    assert answers[0] == answers[1]
    assert [a["leaseReleased"] for a in answers[0]] == [False] * 4 + [True] * 2
    after = await same_after(counted, here, names, None)
    assert after["cursor"]["committed"] == 5


async def test_a_repeated_transaction_id_in_one_pop_takes_the_general_path(
        here: httpx.AsyncClient, there: httpx.AsyncClient, counted: asyncpg.Connection,
        queue_name: str) -> None:
    """Without deduplication a pop may deliver an id twice; `queen.ack` resolves both acks
    to the first occurrence, so the commit stops below the last message and the lease
    stays: not what a whole delivery's commit would do."""
    names = await twin_queues(here, queue_name, ["x1", "y", "x2"], dedup=False,
                              ids=["X", "Y", "X"])
    popped = await pop_both(here, names, 3)
    answers = []
    for client, messages in ((here, popped[0]), (there, popped[1])):
        before = await calls(counted)
        answers.append(await ack_batch(client, acks_of(messages)))
        await counted_calls(counted, before, (0, 1))
    assert answers[0] == answers[1]
    assert [(a["success"], a["leaseReleased"]) for a in answers[0]] == [(True, False)] * 3
    states = [await cursor(counted, name, None) for name in names]
    assert states[0] == states[1]
    assert states[0]["committed"] == 1 and states[0]["lease_live"] is True


async def test_acks_out_of_delivery_order_take_the_general_path(
        here: httpx.AsyncClient, there: httpx.AsyncClient, counted: asyncpg.Connection,
        queue_name: str) -> None:
    names = await twin_queues(here, queue_name, list(range(4)))
    popped = await pop_both(here, names, 4)
    answers = []
    for client, messages in ((here, popped[0]), (there, popped[1])):
        before = await calls(counted)
        answers.append(await ack_batch(client, acks_of(messages[::-1])))
        await counted_calls(counted, before, (0, 1))
    assert answers[0] == answers[1]
    assert all(a["success"] and a["leaseReleased"] for a in answers[0])
    await same_after(counted, here, names, None)


@pytest.mark.parametrize("status", ["failed", "retry", "dlq"])
async def test_a_signal_among_the_acks_takes_the_general_path(
        here: httpx.AsyncClient, there: httpx.AsyncClient, counted: asyncpg.Connection,
        queue_name: str, status: str) -> None:
    names = await twin_queues(here, queue_name, list(range(4)))
    popped = await pop_both(here, names, 4)
    answers = []
    for client, messages in ((here, popped[0]), (there, popped[1])):
        items = acks_of(messages)
        items[1]["status"] = status
        before = await calls(counted)
        answers.append(await ack_batch(client, items))
        await counted_calls(counted, before, (0, 1))
    assert answers[0] == answers[1]
    after = await same_after(counted, here, names, None)
    # A dead letter at the head is committed past; a failure or a retry holds the cursor.
    assert after["cursor"]["committed"] == (1 if status == "dlq" else 0)


async def test_a_whole_delivery_of_several_partitions_is_one_statement(
        here: httpx.AsyncClient, there: httpx.AsyncClient, counted: asyncpg.Connection,
        queue_name: str) -> None:
    names = (queue_name + "-here", queue_name + "-there")
    for name in names:
        await configure(here, name, dedupWindowSeconds=3600, leaseTime=60)
        for partition in ("p1", "p2"):
            await push_items(here, name, [f"{partition}-{i}" for i in range(3)],
                             partition=partition, prefix=partition)
    bodies = [await pop_json(here, name, batch=4, partitions=2) for name in names]
    assert bodies[0] is not None and bodies[1] is not None
    assert len({m["partitionId"] for m in bodies[0]["messages"]}) == 2
    answers = []
    for client, body, expected in ((here, bodies[0], (1, 0)), (there, bodies[1], (0, 1))):
        before = await calls(counted)
        answers.append(await ack_batch(client, acks_of(body["messages"])))
        await counted_calls(counted, before, expected)
    # The twins may split the batch between their partitions otherwise: each answer is
    # the same for every item of its delivery, and the same on both.
    for answer, body in zip(answers, bodies):
        assert [a["transactionId"] for a in answer] == [
            m["transactionId"] for m in body["messages"]]
        assert {(a["success"], a["error"], a["leaseReleased"], a["dlq"]) for a in answer} == {
            (True, None, True, False)}
    for name in names:
        rows = [await cursor_row(counted, name, partition=p) for p in ("p1", "p2")]
        assert all(r is not None and r["worker_id"] is None for r in rows)
        assert sum(r["committed"] + 1 for r in rows if r is not None) == 4
        assert sum(r["total_consumed"] for r in rows if r is not None) == 4
        rest = await pop_json(here, name, batch=10, partitions=2)
        assert rest is not None and len(rest["messages"]) == 2


async def test_a_whole_ack_wakes_a_long_poll_parked_on_another_process(
        here: httpx.AsyncClient, there: httpx.AsyncClient, counted: asyncpg.Connection,
        queue_name: str) -> None:
    """The rest of the partition waits behind the lease; once the whole delivery is acked,
    a pop parked on the other process hears it (the wake-up queen.ack would answer) and
    takes the rest, long before its timeout."""
    await configure(here, queue_name, dedupWindowSeconds=3600, leaseTime=60)
    await push_items(here, queue_name, list(range(6)))
    body = await pop_json(here, queue_name, batch=4)
    assert body is not None
    parked = asyncio.create_task(there.get(f"/api/v1/pop/queue/{queue_name}", params={
        "batch": "10", "wait": "true", "timeout": "20000"}))
    await asyncio.sleep(1.0)  # parked by now (the partition is leased for a minute)
    assert not parked.done()
    before = await calls(counted)
    loop = asyncio.get_running_loop()
    acked_at = loop.time()
    answers = await ack_batch(here, acks_of(body["messages"]))
    assert all(a["success"] and a["leaseReleased"] for a in answers)
    r = await asyncio.wait_for(parked, 30)
    assert r.status_code == 200, r.text
    assert [m["data"] for m in r.json()["messages"]] == [4, 5]
    assert loop.time() - acked_at < 10  # woken, not timed out
    await counted_calls(counted, before, (1, 0))
