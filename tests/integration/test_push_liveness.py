"""Every push is answered promptly, even when no later push comes to wake the write path.

Issue 7, point 1: when every flush slot of a worker finished in the same loop iteration, work
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
import pytest

from tests.support import BrokerProcess, fetch_records

ANSWER_WITHIN = 5.0  # seconds; a healthy push answers in milliseconds


@pytest.fixture(scope="module")
def one_slot_broker(database_url: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(database_url, workers=2,
                       env={"COALESCER_MAX_CONCURRENT_FLUSHES": "1"}) as proc:
        yield proc


@pytest.fixture(params=[("default", 40), ("one-flush-slot", 10)], ids=lambda p: p[0])
def target(request: pytest.FixtureRequest) -> tuple[BrokerProcess, int]:
    """A broker and how many rounds to run against it."""
    name, rounds = request.param
    fixture = "broker" if name == "default" else "one_slot_broker"
    return request.getfixturevalue(fixture), rounds


async def _push(client: httpx.AsyncClient, items: list[dict[str, object]]) -> list[str]:
    r = await asyncio.wait_for(client.post("/api/v1/push", json={"items": items}),
                               ANSWER_WITHIN)
    assert r.status_code == 201, r.text
    return [entry["status"] for entry in r.json()]


async def test_sequential_pushes_touching_eight_partitions_are_each_answered(
        target: tuple[BrokerProcess, int], queue_name: str) -> None:
    broker, _ = target
    rounds = 40
    # More partitions than flush slots per worker (4): some wait behind the first flushes.
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as client:
        for n in range(rounds):
            items = [{"queue": queue_name, "partition": f"p{k}", "transactionId": f"r{n}-p{k}",
                      "payload": {"round": n}} for k in range(8)]
            assert await _push(client, items) == ["queued"] * 8, f"round {n}"
        for k in range(8):
            entry = await fetch_records(client, queue_name, f"p{k}")
            assert [r["payload"] for r in entry["records"]] == \
                [{"round": n} for n in range(rounds)]


async def test_rounds_of_fifty_concurrent_pushes_to_fifty_partitions_are_all_answered(
        target: tuple[BrokerProcess, int], queue_name: str) -> None:
    broker, rounds = target
    limits = httpx.Limits(max_connections=50, max_keepalive_connections=50)
    async with httpx.AsyncClient(base_url=broker.url, timeout=30, limits=limits) as client:
        for n in range(rounds):
            answers = await asyncio.gather(*(
                _push(client, [{"queue": queue_name, "partition": f"p{k}",
                                "transactionId": f"r{n}-p{k}", "payload": n}])
                for k in range(50)))
            assert answers == [["queued"]] * 50, f"round {n}"
        counts = [len((await fetch_records(client, queue_name, f"p{k}"))["records"])
                  for k in range(50)]
    assert counts == [rounds] * 50
