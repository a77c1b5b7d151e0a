"""The pop autopilot (wire-protocol-extensions §20.5): the width a pop claims when it omits
`partitions`, the batch when it omits `batch`, the echo, and the official client's default
consume (autopilot on, neither knob set)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
from queen import Queen

from tests.support import BrokerProcess, push_items


async def fill(client: httpx.AsyncClient, queue: str, partitions: int, per: int) -> None:
    for p in range(partitions):
        await push_items(client, queue, [{"p": p, "n": i} for i in range(per)],
                         partition=f"p{p}", prefix=f"p{p}-")


async def get(client: httpx.AsyncClient, queue: str, **params: str) -> httpx.Response:
    return await client.get(f"/api/v1/pop/queue/{queue}", params={"wait": "false", **params})


async def test_the_first_pop_of_a_new_group_claims_one_partition_and_echoes_it(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await fill(http, queue_name, 5, 2)
    r = await get(http, queue_name, autopilot="true", consumerGroup="a")
    body = r.json()
    # Nothing is known to be ready for the new lane on this process: width 1.
    assert (body["partitionsClaimed"], len(body["messages"])) == (1, 2)
    assert body["autopilot"] == {"partitions": 1, "batch": 100, "waitMs": 100}
    # A sent width is used as given: the 4 other partitions.
    r = await get(http, queue_name, autopilot="true", partitions="10", consumerGroup="a")
    assert (r.json()["partitionsClaimed"], r.json()["autopilot"]["partitions"]) == (4, 10)
    # Every partition is leased: nothing left for the group (a 204, no echo).
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
    # The batch as sent; the width the new lane's: one partition, its 3 messages.
    assert len(body["messages"]) == 3 and body["autopilot"]["batch"] == 4
    assert body["autopilot"]["partitions"] == 1 and body["partitionsClaimed"] == 1
    r = await http.get(f"/api/v1/pop/queue/{queue_name}/partition/p1",
                       params={"wait": "false", "autopilot": "true", "consumerGroup": "d"})
    assert r.json()["autopilot"]["partitions"] == 1 and r.json()["partitionsClaimed"] == 1


async def test_a_discovery_pop_claims_one_partition(http: httpx.AsyncClient) -> None:
    ns = "ns" + uuid.uuid4().hex[:10]
    for name in ("a", "b", "c"):
        await push_items(http, f"{ns}.jobs.{name}", [name], prefix=name)
    r = await http.get("/api/v1/pop", params={"namespace": ns, "autopilot": "true",
                                              "consumerGroup": "d", "wait": "false"})
    body = r.json()
    assert (body["partitionsClaimed"], len(body["messages"])) == (1, 1)
    assert body["autopilot"] == {"partitions": 1, "batch": 100, "waitMs": 100}


async def test_an_empty_conflating_answer_carries_no_echo(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await fill(http, queue_name, 3, 2)
    params = {"autopilot": "true", "conflation": "true", "consumerGroup": "g"}
    r = await get(http, queue_name, **params)
    body = r.json()
    # A conflating pop claims its conflation width (the batch, 1..64), not the autopilot's.
    assert (body["partitionsClaimed"], body["conflation"]) == (3, True)
    assert body["autopilot"] == {"partitions": 64, "batch": 100, "waitMs": 100}
    r = await get(http, queue_name, **params)  # all leased: 200 (never 204), but no echo
    assert r.status_code == 200 and r.json()["messages"] == []
    assert r.json()["conflation"] is True and "autopilot" not in r.json()


async def test_official_client_first_pop_of_a_consume_claims_one_partition(
        broker: BrokerProcess, http: httpx.AsyncClient, queue_name: str) -> None:
    await fill(http, queue_name, 4, 2)
    calls: list[list[dict[str, Any]]] = []
    done = asyncio.Event()

    async def handler(messages: Any) -> None:
        calls.append(messages)
        if sum(len(c) for c in calls) >= 8:
            done.set()

    async with Queen(broker.url) as client:
        builder = client.queue(queue_name).group("g").batch(100).timeout_millis(500)
        await asyncio.wait_for(builder.consume(handler, signal=done), 30)
    # The consumer is new to the broker: its first pop claims one partition, whose two
    # messages the handler gets as one list; later pops take the rest.
    assert isinstance(calls[0], list) and len(calls[0]) == 2
    assert len({m["partition"] for m in calls[0]}) == 1
    assert sorted(m["data"]["p"] for c in calls for m in c) == [0, 0, 1, 1, 2, 2, 3, 3]


async def test_official_client_default_consume_hands_a_list(
        broker: BrokerProcess, http: httpx.AsyncClient, queue_name: str) -> None:
    await fill(http, queue_name, 1, 3)
    calls: list[Any] = []
    done = asyncio.Event()

    async def handler(messages: Any) -> None:
        calls.append(messages)
        if sum(len(c) for c in calls) >= 3:
            done.set()

    async with Queen(broker.url) as client:
        builder = client.queue(queue_name).group("g").timeout_millis(500)
        await asyncio.wait_for(builder.consume(handler, signal=done), 30)
    assert isinstance(calls[0], list) and [m["data"]["n"] for m in calls[0]] == [0, 1, 2]
