"""Every push is answered promptly, even when no later push comes to wake the write path.

When every flush slot of a worker finished in the same loop iteration, work
waiting behind them stayed unwritten until some unrelated push reached that worker; a client
waiting for its answers before sending more waited for its own timeout. Both shapes that
showed it run here through real 2-worker brokers, each push under a short deadline: the
session's broker (default settings), and one with a single flush slot per worker, where every
flush that finishes with work waiting behind it is the "every slot finished at once" case
(on the code before the fix, this one fails on its first round).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import msgspec
import pytest

from loadtest.httpc import Connection
from tests.support import BrokerProcess, fetch_records

ANSWER_WITHIN = 5.0  # seconds; a healthy push answers in milliseconds
ROUNDS = 40


@pytest.fixture(scope="module")
def one_slot_broker(database_url: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(database_url, workers=2,
                       env={"COALESCER_MAX_CONCURRENT_FLUSHES": "1"}) as proc:
        yield proc


@pytest.fixture(params=["default", "one-flush-slot"])
def target(request: pytest.FixtureRequest) -> BrokerProcess:
    fixture = "broker" if request.param == "default" else "one_slot_broker"
    broker: BrokerProcess = request.getfixturevalue(fixture)
    return broker


async def _push(client: httpx.AsyncClient, items: list[dict[str, object]]) -> list[str]:
    r = await asyncio.wait_for(client.post("/api/v1/push", json={"items": items}),
                               ANSWER_WITHIN)
    assert r.status_code == 201, r.text
    return [entry["status"] for entry in r.json()]


async def test_sequential_pushes_touching_eight_partitions_are_each_answered(
        target: BrokerProcess, queue_name: str) -> None:
    # More partitions than flush slots per worker (4): some wait behind the first flushes.
    async with httpx.AsyncClient(base_url=target.url, timeout=30) as client:
        for n in range(ROUNDS):
            items = [{"queue": queue_name, "partition": f"p{k}", "transactionId": f"r{n}-p{k}",
                      "payload": {"round": n}} for k in range(8)]
            assert await _push(client, items) == ["queued"] * 8, f"round {n}"
        for k in range(8):
            entry = await fetch_records(client, queue_name, f"p{k}")
            assert [r["payload"] for r in entry["records"]] == \
                [{"round": n} for n in range(ROUNDS)]


async def test_rounds_of_fifty_concurrent_pushes_to_fifty_partitions_are_all_answered(
        target: BrokerProcess, queue_name: str) -> None:
    # 50 keep-alive connections of the load tool's lean client: httpx would spend most of
    # the test's time in the client on this 2-core machine.
    connections = [Connection(target.url) for _ in range(50)]
    try:
        for n in range(ROUNDS):
            answers = await asyncio.gather(*(
                _push_on(conn, {"queue": queue_name, "partition": f"p{k}",
                                "transactionId": f"r{n}-p{k}", "payload": n})
                for k, conn in enumerate(connections)))
            assert answers == [201] * 50, f"round {n}"
    finally:
        await asyncio.gather(*(conn.close() for conn in connections))
    async with httpx.AsyncClient(base_url=target.url, timeout=30) as client:
        counts = [len((await fetch_records(client, queue_name, f"p{k}"))["records"])
                  for k in range(50)]
    assert counts == [ROUNDS] * 50


async def _push_on(conn: Connection, item: dict[str, object]) -> int:
    answer = await conn.request("POST", "/api/v1/push", msgspec.json.encode({"items": [item]}),
                                timeout=ANSWER_WITHIN)
    assert msgspec.json.decode(answer.body)[0]["status"] == "queued", answer.body
    return answer.status
