"""A pop never answers "nothing" for what the client already had an answer for.

204 means nothing was deliverable to the group when the pop arrived: for every push, ack,
nack, seek or configure whose answer the client already had, whichever process or broker
answered it, and for every lease whose time was up when the pop arrived, whichever process
claimed it (wire protocol §4.2). Each broker process learns of the others' commits by
notification (core/engine/ready), so these tests send consecutive requests of one client to
different processes and allow no latency at all: the answer right after is the one checked.

- two brokers of one worker each: every request alternates between them (two processes);
- one broker of two workers over fresh connections: the kernel picks the worker.

`QUEEN_DRAIN_LOOPS` sets how many drain loops each of the two drain tests runs (the issue's
1,000 is a run of its own: `QUEEN_DRAIN_LOOPS=1000 python -m pytest -n 0 -k drain tests/...`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest

from tests.support import BrokerProcess

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus

DRAIN_LOOPS = int(os.environ.get("QUEEN_DRAIN_LOOPS", "40"))
DRAIN_MESSAGES = 8
CONCURRENT_LOOPS = 4

Clients = Callable[[], httpx.AsyncClient]


@pytest.fixture(scope="module")
def one_worker_pair(database_url: str) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    """Two brokers of one web process each (no reaper: nobody announces lease expiries)."""
    with BrokerProcess(database_url, workers=1) as a, BrokerProcess(database_url, workers=1) as b:
        yield a, b


@pytest.fixture
async def alternating(one_worker_pair: tuple[BrokerProcess, BrokerProcess]
                      ) -> AsyncIterator[Clients]:
    """Each call answers the client of the other broker than the call before."""
    a, b = one_worker_pair
    async with httpx.AsyncClient(base_url=a.url, timeout=30) as ca, \
            httpx.AsyncClient(base_url=b.url, timeout=30) as cb:
        turn = itertools.cycle([ca, cb])
        yield lambda: next(turn)


@pytest.fixture
async def fresh_connections(broker: BrokerProcess) -> AsyncIterator[Clients]:
    """One client per request of a 2-worker broker: no keep-alive, so each request is a new
    connection that either worker may accept."""
    async with httpx.AsyncClient(base_url=broker.url, timeout=30,
                                 limits=httpx.Limits(max_keepalive_connections=0)) as client:
        yield lambda: client


async def _push(http: httpx.AsyncClient, queue: str, count: int, partition: str = "p",
                prefix: str = "t") -> None:
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": partition, "payload": {"n": i},
         "transactionId": f"{prefix}{i}"} for i in range(count)]})
    assert r.status_code == 201, r.text
    assert all(item["status"] == "queued" for item in r.json()), r.text


async def _pop(http: httpx.AsyncClient, queue: str, group: str | None, *,
               partition: str | None = None, batch: int = 1) -> dict | None:  # type: ignore[type-arg]
    params = {"wait": "false", "batch": str(batch)}
    if group is not None:
        params["consumerGroup"] = group
    path = f"/api/v1/pop/queue/{queue}"
    if partition is not None:
        path += f"/partition/{partition}"
    r = await http.get(path, params=params)
    assert r.status_code in (200, 204), r.text
    return None if r.status_code == 204 else r.json()  # type: ignore[no-any-return]


async def _ack(http: httpx.AsyncClient, body: dict, group: str | None,  # type: ignore[type-arg]
               status: str = "completed") -> None:
    r = await http.post("/api/v1/ack/batch", json={"consumerGroup": group, "acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "leaseId": body["leaseId"], "status": status} for m in body["messages"]]})
    assert r.status_code == 200, r.text
    assert all(a["success"] for a in r.json()), r.text


async def _drain(clients: Clients, queue: str, group: str | None) -> int:
    """Queen's JS client's drain loop: pop one without waiting, ack it, until a 204."""
    read = 0
    while (body := await _pop(clients(), queue, group)) is not None:
        read += len(body["messages"])
        await _ack(clients(), body, group)
    return read


async def _drain_loops(clients: Clients, loops: int) -> list[str]:
    failures: list[str] = []

    async def one(n: int) -> None:
        queue = f"drain-{uuid.uuid4().hex[:10]}"
        await _push(clients(), queue, DRAIN_MESSAGES)
        # Queue mode and a consumer group new to the queue take turns.
        group = None if n % 2 else f"g{n}"
        read = await _drain(clients, queue, group)
        if read != DRAIN_MESSAGES:
            failures.append(f"loop {n} ({group or 'queue mode'}): read {read} of "
                            f"{DRAIN_MESSAGES}")

    numbers = iter(range(loops))

    async def runner() -> None:
        for n in numbers:
            await one(n)

    await asyncio.gather(*(runner() for _ in range(CONCURRENT_LOOPS)))
    return failures


async def test_drain_loops_over_two_brokers_read_every_message(alternating: Clients) -> None:
    failures = await _drain_loops(alternating, DRAIN_LOOPS)
    assert not failures, f"{len(failures)} of {DRAIN_LOOPS} drains ended early: {failures[:5]}"


async def test_drain_loops_over_fresh_connections_read_every_message(
        fresh_connections: Clients) -> None:
    failures = await _drain_loops(fresh_connections, DRAIN_LOOPS)
    assert not failures, f"{len(failures)} of {DRAIN_LOOPS} drains ended early: {failures[:5]}"


@pytest.mark.parametrize("group", [None, "g"])
async def test_a_push_is_popped_by_the_next_request_elsewhere(alternating: Clients,
                                                              group: str | None) -> None:
    queue = f"next-{uuid.uuid4().hex[:10]}"
    await _push(alternating(), queue, 1, prefix="seed")
    # Both brokers' ready sets know the queue's lane (seeded, trusted) before the push.
    for _ in range(2):
        body = await _pop(alternating(), queue, group)
        if body is not None:
            await _ack(alternating(), body, group)
    assert await _pop(alternating(), queue, group) is None
    for n in range(20):
        await _push(alternating(), queue, 1, partition=f"p{n}", prefix=f"x{n}-")
        body = await _pop(alternating(), queue, group)
        assert body is not None, f"push {n}: the pop right after it answered 204"
        await _ack(alternating(), body, group)


async def test_a_nack_is_redelivered_by_the_next_request_elsewhere(alternating: Clients) -> None:
    queue = f"nack-{uuid.uuid4().hex[:10]}"
    r = await alternating().post("/api/v1/configure", json={
        "queue": queue, "options": {"retryLimit": 50, "retryDelay": 0}})
    assert r.status_code in (200, 201), r.text
    await _push(alternating(), queue, 3)
    for n in range(10):
        body = await _pop(alternating(), queue, "g")
        assert body is not None, f"nack {n}: the pop right after it answered 204"
        await _ack(alternating(), body, "g", status="failed")


async def test_a_nack_is_redelivered_elsewhere_once_its_retry_delay_ran(
        alternating: Clients) -> None:
    """The broker that claimed the span defers it to its lease's end; the nack went to the
    other one. Once the retryDelay has run, the claimer's next pop delivers it."""
    queue = f"delay-{uuid.uuid4().hex[:10]}"
    r = await alternating().post("/api/v1/configure", json={
        "queue": queue, "options": {"retryLimit": 50, "retryDelay": 300}})
    assert r.status_code in (200, 201), r.text
    await _push(alternating(), queue, 2)
    claimer, other = alternating(), alternating()
    for n in range(5):
        body = await _pop(claimer, queue, "g")
        assert body is not None, f"nack {n}: 204 after the retry delay had run"
        await _ack(other, body, "g", status="failed")
        assert await _pop(claimer, queue, "g") is None  # the delay holds it
        await asyncio.sleep(0.35)


@pytest.fixture
async def both(one_worker_pair: tuple[BrokerProcess, BrokerProcess]
               ) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    a, b = one_worker_pair
    async with httpx.AsyncClient(base_url=a.url, timeout=30) as ca, \
            httpx.AsyncClient(base_url=b.url, timeout=30) as cb:
        yield ca, cb


async def test_a_partition_pop_after_an_ack_elsewhere_delivers(
        both: tuple[httpx.AsyncClient, httpx.AsyncClient]) -> None:
    """One broker pops the partition and acks it; later, a pop naming the partition on the
    other broker delivers the next message. The first broker's word that it claimed the
    partition and its word that the ack released it reach the other broker in one round."""
    queue = f"named-{uuid.uuid4().hex[:10]}"
    await _push(both[0], queue, 6)
    for n in range(6):
        here = both[n % 2]
        body = await _pop(here, queue, None, partition="p")
        assert body is not None, f"message {n}: 204 on a broker 0.1 s after the other's ack"
        await _ack(here, body, None)
        await asyncio.sleep(0.1)  # both announcements have arrived everywhere
    assert await _pop(both[0], queue, None, partition="p") is None


@pytest.mark.parametrize("group", [None, "g"])
async def test_an_expired_lease_is_claimable_at_once_on_the_other_broker(
        both: tuple[httpx.AsyncClient, httpx.AsyncClient], group: str | None) -> None:
    """No reaper runs: nobody announces the expiry. A pop on the broker that did not claim
    the lease delivers as soon as the lease's time is up."""
    claimer, other = both
    queue = f"lease-{uuid.uuid4().hex[:10]}"
    r = await claimer.post("/api/v1/configure", json={
        "queue": queue, "options": {"leaseTime": 1}})
    assert r.status_code in (200, 201), r.text
    await _push(claimer, queue, 3)
    first = await _pop(other, queue, group)  # the other broker's lane is in use
    assert first is not None
    await _ack(other, first, group)
    held = await _pop(claimer, queue, group)
    assert held is not None
    claimed_at = time.monotonic()
    await asyncio.sleep(0.1)  # the claim's announcement has arrived
    assert await _pop(other, queue, group) is None  # leased elsewhere, not yet expired
    await asyncio.sleep(max(0.0, 1.1 - (time.monotonic() - claimed_at)))
    again = await _pop(other, queue, group)
    assert again is not None, "204 on the other broker after the lease's time was up"
    assert again["messages"][0]["transactionId"] == held["messages"][0]["transactionId"]
