"""The pop autopilot (wire-protocol-extensions §20.5): the width a pop claims when it omits
`partitions`, the batch when it omits `batch`, the echo, and the official client's default
consume (autopilot on, neither knob set)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from queen import Queen

from core.engine.pop import PopRequest
from core.storage.database import Database
from tests.support import BrokerProcess, core_reader, push_items


async def fill(client: httpx.AsyncClient, queue: str, partitions: int, per: int) -> None:
    for p in range(partitions):
        await push_items(client, queue, [{"p": p, "n": i} for i in range(per)],
                         partition=f"p{p}", prefix=f"p{p}-")


async def get(client: httpx.AsyncClient, queue: str, **params: str) -> httpx.Response:
    return await client.get(f"/api/v1/pop/queue/{queue}", params={"wait": "false", **params})


async def test_width_is_the_ready_partitions_and_the_echo_says_so(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await fill(http, queue_name, 5, 2)
    r = await get(http, queue_name, autopilot="true", consumerGroup="a")
    body = r.json()
    assert (body["partitionsClaimed"], len(body["messages"])) == (5, 10)
    assert body["autopilot"]["partitions"] == 5 and body["autopilot"]["batch"] == 100
    # The leased partitions are not ready: nothing left for the group (a 204, no echo).
    r = await get(http, queue_name, autopilot="true", consumerGroup="a")
    assert r.status_code == 204 and r.content == b""


async def test_sent_values_are_used_as_given(http: httpx.AsyncClient, queue_name: str) -> None:
    await fill(http, queue_name, 4, 3)
    r = await get(http, queue_name, autopilot="true", partitions="2", consumerGroup="a")
    body = r.json()
    assert body["partitionsClaimed"] == 2 and body["autopilot"] == {
        "partitions": 2, "batch": 100, "waitMs": 100}
    r = await get(http, queue_name, autopilot="true", batch="4", consumerGroup="b")
    body = r.json()
    # Width from the 4 ready partitions, at most 4 messages.
    assert len(body["messages"]) == 4 and body["autopilot"]["batch"] == 4
    assert body["autopilot"]["partitions"] == 4
    r = await http.get(f"/api/v1/pop/queue/{queue_name}/partition/p1",
                       params={"wait": "false", "autopilot": "true", "consumerGroup": "d"})
    assert r.json()["autopilot"]["partitions"] == 1 and r.json()["partitionsClaimed"] == 1


async def test_width_divides_ready_partitions_among_pops_in_flight(
        core_db: Database, http: httpx.AsyncClient, queue_name: str) -> None:
    await fill(http, queue_name, 7, 1)
    request = PopRequest(group="g", batch=100, queue=queue_name, auto_width=True,
                         in_flight=3)
    reader = core_reader(core_db)
    first = await reader.pop(request)
    assert (first.partitions_claimed, first.width) == (3, 3)  # ceil(7 / 3)
    second = await reader.pop(request)
    assert (second.partitions_claimed, second.width) == (2, 2)  # ceil(4 / 3)
    third = await reader.pop(PopRequest(group="g", batch=100, queue=queue_name,
                                          auto_width=True, in_flight=8))
    assert (third.partitions_claimed, third.width) == (1, 1)  # 2 ready, 8 in flight: 1


async def test_official_client_default_consume_claims_every_ready_partition(
        broker: BrokerProcess, http: httpx.AsyncClient, queue_name: str) -> None:
    await fill(http, queue_name, 4, 2)
    calls: list[list[dict[str, Any]]] = []
    done = asyncio.Event()

    async def handler(messages: Any) -> None:
        calls.append(messages)
        if sum(len(c) for c in calls) >= 8:
            done.set()

    async with Queen(broker.url) as client:
        builder = client.queue(queue_name).group("g").timeout_millis(500)
        await asyncio.wait_for(builder.consume(handler, signal=done), 30)
    # One pop took the 4 ready partitions (autopilot width), handed over as one list.
    assert isinstance(calls[0], list) and len(calls[0]) == 8
    assert {m["partition"] for m in calls[0]} == {"p0", "p1", "p2", "p3"}
