"""An ephemeral pop's answer keeps within the pop byte budget (QUEEN_POP_MAX_BYTES, as the
log's pops; schema/functions/80_ephemeral.sql, queen.eph_pop): the messages chosen stop where
their payloads' bytes pass it, at least one goes out, and what is left out is neither leased
nor freed, so the next pop gets it at once. A long poll with a windowBuffer counts what its
earlier calls gathered. Before, a pop answered its whole batch whatever the bytes, and a
windowed autoAck long poll kept gathering while producers refilled the queue."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support import ANSWER_BUDGET

EPH = "/api/v1/ephemeral"
BUDGET = ANSWER_BUDGET
SIZE = 100_000  # a payload's bytes: ten fit in the budget
COUNT = 24


@pytest.fixture
def client(budget_client: httpx.AsyncClient) -> httpx.AsyncClient:
    return budget_client  # the session's broker with 1 MiB budgets (tests/conftest.py)


@pytest.fixture
def eq() -> str:
    return "eq-" + uuid.uuid4().hex[:12]


def _payload(n: int, size: int) -> dict[str, Any]:
    """About `size` bytes of compact JSON, numbered."""
    return {"n": n, "b": base64.b64encode(os.urandom(size * 3 // 4)).decode()}


def _bytes(payload: Any) -> int:
    return len(json.dumps(payload, separators=(",", ":")))


async def _push(client: httpx.AsyncClient, queue: str, numbers: range, size: int = SIZE, *,
                partition: str = "p") -> None:
    body = {"queue": queue, "partition": partition,
            "messages": [{"payload": _payload(n, size)} for n in numbers]}
    r = await client.post(f"{EPH}/push", content=json.dumps(body, separators=(",", ":")),
                          headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text


async def _pop(client: httpx.AsyncClient, queue: str, **params: str) -> list[dict[str, Any]]:
    r = await client.get(f"{EPH}/pop", params={"queue": queue, "batch": "100", **params})
    assert r.status_code == 200, r.text
    return list(r.json()["messages"])


async def _ack(client: httpx.AsyncClient, queue: str, got: list[dict[str, Any]],
               status: str = "completed") -> None:
    r = await client.post(f"{EPH}/ack", json={"queue": queue, "acks": [
        {"id": m["id"], "status": status} for m in got]})
    assert r.status_code == 200, r.text
    want = "acked" if status == "completed" else "redelivered"
    assert all(x["outcome"] == want for x in r.json()["results"]), r.text


async def _held(db: asyncpg.Connection, queue: str) -> tuple[int, int]:
    """(messages stored, leases) of the queue."""
    row = await db.fetchrow(
        "SELECT (SELECT count(*) FROM queen.eph_message WHERE queue = $1) AS messages,"
        " (SELECT count(*) FROM queen.eph_lease WHERE queue = $1) AS leases", queue)
    assert row is not None
    return row["messages"], row["leases"]


def _numbers(got: list[dict[str, Any]]) -> list[int]:
    return [m["payload"]["n"] for m in got]


def _answer_bytes(got: list[dict[str, Any]]) -> int:
    return sum(_bytes(m["payload"]) for m in got)


@pytest.mark.parametrize("auto_ack", [False, True], ids=["leased", "autoAck"])
async def test_a_pop_delivers_a_prefix_within_the_budget_and_the_next_pop_the_rest(
        client: httpx.AsyncClient, db: asyncpg.Connection, eq: str, auto_ack: bool) -> None:
    await _push(client, eq, range(COUNT))
    seen: list[int] = []
    pops = 0
    while got := await _pop(client, eq, autoAck=str(auto_ack).lower()):
        pops += 1
        assert pops <= COUNT, "no progress"
        assert min(5, COUNT - len(seen)) <= len(got) < COUNT
        assert _answer_bytes(got) <= BUDGET
        assert _numbers(got) == list(range(len(seen), len(seen) + len(got)))
        seen += _numbers(got)
        messages, leases = await _held(db, eq)
        if auto_ack:  # freed what went out, nothing leased; the rest stays
            assert (messages, leases) == (COUNT - len(seen), 0)
        else:  # leased only what went out
            assert (messages, leases) == (COUNT - len(seen) + len(got), len(got))
            await _ack(client, eq, got)
    assert pops >= 2
    assert seen == list(range(COUNT))  # everything, once each, in order
    assert await _held(db, eq) == (0, 0)


async def test_redeliveries_keep_within_the_budget_and_the_rest_comes_next(
        client: httpx.AsyncClient, db: asyncpg.Connection, eq: str) -> None:
    """Every message leased, then handed back (retry): a pop takes back only what fits,
    the next pop the rest at once, each once."""
    await _push(client, eq, range(COUNT))
    leased: list[dict[str, Any]] = []
    while got := await _pop(client, eq):
        leased += got
    assert _numbers(leased) == list(range(COUNT))
    await _ack(client, eq, leased, status="retry")
    again: list[int] = []
    pops = 0
    while got := await _pop(client, eq):
        pops += 1
        assert pops <= COUNT, "no progress"
        assert _answer_bytes(got) <= BUDGET and len(got) >= min(5, COUNT - len(again))
        assert all(m["attempts"] == 2 for m in got)
        again += _numbers(got)
        await _ack(client, eq, got)
    assert pops >= 2 and again == list(range(COUNT))
    assert await _held(db, eq) == (0, 0)


async def test_a_message_larger_than_the_budget_is_delivered_alone(
        client: httpx.AsyncClient, db: asyncpg.Connection, eq: str) -> None:
    for n in range(3):
        await _push(client, eq, range(n, n + 1), BUDGET * 3 // 2)
    for n in range(3):
        got = await _pop(client, eq)
        assert _numbers(got) == [n] and _answer_bytes(got) > BUDGET
        assert await _held(db, eq) == (3 - n, 1)
        await _ack(client, eq, got)
    assert await _pop(client, eq) == []


async def test_the_budget_stops_at_a_cut_ring_across_partitions(
        client: httpx.AsyncClient, db: asyncpg.Connection, eq: str) -> None:
    """Two rings, each larger than the budget: a pop of every partition takes the first
    ring's messages that fit and nothing of the second; the next pops the rest."""
    for partition in ("a", "b"):
        await _push(client, eq, range(12), partition=partition)
    first = await _pop(client, eq)
    assert {m["partition"] for m in first} == {"a"} and _answer_bytes(first) <= BUDGET
    assert len(first) == BUDGET // (SIZE + 20)
    taken = [(m["partition"], m["payload"]["n"]) for m in first]
    while got := await _pop(client, eq):
        assert _answer_bytes(got) <= BUDGET
        taken += [(m["partition"], m["payload"]["n"]) for m in got]
    assert sorted(taken) == [(p, n) for p in ("a", "b") for n in range(12)]
    assert len(set(taken)) == 24
    assert await _held(db, eq) == (24, 24)


async def test_a_windowed_long_poll_counts_what_it_gathered(
        client: httpx.AsyncClient, db: asyncpg.Connection, eq: str) -> None:
    """A windowBuffer pop (autoAck, wait) gathers over several calls: all of them together
    keep within the budget, and the next pop gets the rest."""
    r = await client.post(f"{EPH}/configure", json={"queue": eq, "options": {
        "windowBuffer": {"ms": 400, "count": 1000}}})
    assert r.status_code == 201, r.text
    await _push(client, eq, range(6))
    seen: list[int] = []
    pushed = 6
    got = await _pop(client, eq, autoAck="true", wait="true", timeout="5000")
    assert _numbers(got) == list(range(6))
    seen += _numbers(got)
    # Now a long poll that starts empty while producers add more than the budget.
    async def produce() -> None:
        nonlocal pushed
        for _ in range(4):
            await asyncio.sleep(0.05)
            await _push(client, eq, range(pushed, pushed + 6))
            pushed += 6

    producer = asyncio.create_task(produce())
    got = await _pop(client, eq, autoAck="true", wait="true", timeout="5000")
    await producer
    assert got and _answer_bytes(got) <= BUDGET
    seen += _numbers(got)
    while got := await _pop(client, eq, autoAck="true"):
        assert _answer_bytes(got) <= BUDGET
        seen += _numbers(got)
    assert seen == list(range(pushed)) and pushed == 30
    assert await _held(db, eq) == (0, 0)


async def test_the_previous_versions_call_still_pops_during_a_rolling_upgrade(
        client: httpx.AsyncClient, db: asyncpg.Connection, eq: str) -> None:
    """A broker of the version before the budget calls queen.eph_pop with five arguments
    until it is replaced: that signature still pops (within the default budget)."""
    await _push(client, eq, range(3))
    rows = await db.fetch("SELECT partition, seq, attempts, payload"
                          " FROM queen.eph_pop($1, NULL, '__QUEUE_MODE__', 10, true)", eq)
    assert [json.loads(r["payload"])["n"] for r in rows] == [0, 1, 2]
    assert await _held(db, eq) == (0, 0)
