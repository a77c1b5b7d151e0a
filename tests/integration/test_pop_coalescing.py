"""Concurrent pops of one request share one claim statement (core/engine/reads/claims.py,
queen.pop_shared): every rule of a single pop still holds.

- 64 waiting pops of one group on a real two-worker tree, with pushes arriving: no message
  goes to two pops, none is skipped (counted by offset);
- the pops that went out together each got their own lease over their own partitions, and
  each lease's acks succeed;
- pops of different groups or queues are never served by one statement's shares;
- a pop whose caller leaves before or while its share is claimed loses nothing: its share
  is not claimed, or leased to nobody and delivered again when the lease ends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from core.engine.ack import AckItem, GroupAck
from core.engine.pop import PopRequest, PopResult
from core.engine.push import PushItem
from core.engine.writes import NewMessage
from core.service import Broker
from core.settings import Settings
from tests.served import Served, fresh_connections
from tests.support import wait_for

PARTITIONS = [f"p{i}" for i in range(8)]


@pytest.fixture
async def broker(database_url: str) -> AsyncIterator[Broker]:
    async with Broker.open(Settings(), dsn=database_url, migrate=False) as b:
        yield b


async def _push(broker: Broker, queue: str, per_partition: int) -> None:
    outcomes = await broker.push([
        PushItem(queue, p, NewMessage(uuid.uuid4(), f"{p}-{i}", b'{"i": 1}'))
        for p in PARTITIONS for i in range(per_partition)])
    assert all(o.verdict is not None and o.verdict.status == "queued" for o in outcomes)


def _offsets(result: PopResult) -> list[tuple[int, int]]:
    return [(int(m.partition_id), m.offset) for m in result.messages()]


async def _ack(broker: Broker, group: str, result: PopResult) -> list[bool]:
    outcome = await broker.ack_batch([
        GroupAck(group, AckItem(m.frame.transaction_id, str(m.partition_id), "completed",
                                result.lease_id)) for m in result.messages()])
    return [o.success for o in outcome.outcomes]


async def test_shares_of_one_statement_get_their_own_leases_and_partitions(
        broker: Broker, queue_name: str) -> None:
    await _push(broker, queue_name, 5)
    lines = broker._pop_lines
    statements, shares = lines.statements, lines.shares
    request = PopRequest(group="g", batch=5, queue=queue_name)
    results = await asyncio.gather(*(broker.pop(request) for _ in range(8)))
    assert lines.shares - shares == 8
    assert lines.statements - statements < 8  # some went out together
    leases = [r.lease_id for r in results if r.claims]
    assert len(leases) == len(set(leases)) == 8  # one partition each, own lease
    claimed = [c.partition_id for r in results for c in r.claims]
    assert len(claimed) == len(set(claimed)) == 8
    for result in results:  # a lease acks its own span, and only that
        assert await _ack(broker, "g", result) == [True] * 5
    assert not (await broker.pop(request)).claims


async def test_pops_of_other_groups_and_queues_are_not_mixed(
        broker: Broker, queue_name: str) -> None:
    other = queue_name + "-other"
    await _push(broker, queue_name, 3)
    await _push(broker, other, 3)
    requests = [PopRequest(group=g, batch=3, queue=q)
                for g in ("a", "b") for q in (queue_name, other)] * 8
    results = await asyncio.gather(*(broker.pop(r) for r in requests))
    got: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for request, result in zip(requests, results, strict=True):
        assert request.queue is not None
        assert all(c.queue == request.queue for c in result.claims)
        got.setdefault((request.group, request.queue), []).extend(_offsets(result))
        assert await _ack(broker, request.group, result) == [True] * result.count
    # Each group got each queue's every message once (8 partitions x 3).
    for key in [(g, q) for g in ("a", "b") for q in (queue_name, other)]:
        assert len(got[key]) == len(set(got[key])) == 24, key


async def test_a_pop_that_leaves_while_its_share_is_claimed_loses_nothing(
        broker: Broker, queue_name: str) -> None:
    """Eight pops at once (leases of 1 s); two leave: one whose statement is out, one
    still waiting for the next. What they would have got is delivered to later pops (after
    the lease ends at worst), and nothing is delivered twice to pops that stayed."""
    await _push(broker, queue_name, 5)
    request = PopRequest(group="g", batch=5, queue=queue_name, lease_seconds=1)
    tasks = [asyncio.ensure_future(broker.pop(request)) for _ in range(8)]
    await asyncio.sleep(0)  # all registered in the line, nothing sent yet
    tasks[5].cancel()  # leaves before its share goes out: it is not claimed
    await asyncio.sleep(0)  # the line's task took the first share: its statement is out
    tasks[0].cancel()  # leaves while its share is claimed: leased to nobody for 1 s
    seen: list[tuple[int, int]] = []
    for task in tasks:
        try:
            result = await task
        except asyncio.CancelledError:
            continue
        seen += _offsets(result)
        assert await _ack(broker, "g", result) == [True] * result.count

    async def rest() -> bool:
        result = await broker.pop(request)
        seen.extend(_offsets(result))
        assert await _ack(broker, "g", result) == [True] * result.count
        return len(seen) >= 40

    await wait_for(rest, timeout=30, interval=0.2)
    assert len(seen) == len(set(seen)) == 40


async def test_a_share_whose_client_is_gone_is_not_claimed(
        broker: Broker, queue_name: str) -> None:
    await _push(broker, queue_name, 1)
    request = PopRequest(group="g", batch=1, queue=queue_name)
    gone = asyncio.Event()
    gone.set()
    first = asyncio.ensure_future(broker.pop(request))
    await asyncio.sleep(0)  # its statement is out: the next ones wait in line
    left = await broker._pop_lines.claim(request, (), gone)
    assert not left.claims
    assert (await first).count == 1
    rest = await asyncio.gather(*(broker.pop(request) for _ in range(8)))
    assert sum(r.count for r in rest) == 7  # the one the gone pop did not take is here


async def test_64_waiting_pops_on_two_workers_deliver_each_message_once(
        served: Served) -> None:
    queue, total = "coalesced", 8 * 40
    seen: Counter[tuple[str, int]] = Counter()
    pushed = asyncio.Event()

    async def consumer() -> None:
        async with fresh_connections(served.url, timeout=30) as c:
            while not (pushed.is_set() and sum(seen.values()) >= total):
                r = await c.get(f"/api/v1/pop/queue/{queue}", params={
                    "wait": "true", "timeout": "1000", "batch": "4", "consumerGroup": "g"})
                if r.status_code != 200:
                    continue
                body = r.json()
                for m in body["messages"]:
                    seen[(m["partitionId"], m["data"]["offset"])] += 1
                a = await c.post("/api/v1/ack/batch", json={"acknowledgments": [
                    {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                     "leaseId": m["leaseId"], "status": "completed",
                     "consumerGroup": "g"} for m in body["messages"]]})
                assert a.status_code == 200, a.text

    async def producer() -> None:
        async with fresh_connections(served.url) as c:
            await asyncio.sleep(0.5)  # the pops are parked by now
            for i in range(40):
                r = await c.post("/api/v1/push", json={"items": [
                    {"queue": queue, "partition": p, "payload": {"offset": i},
                     "transactionId": f"{p}-{i}"} for p in PARTITIONS]})
                assert r.status_code == 201, r.text
                await asyncio.sleep(0.01)
        pushed.set()

    # Create the queue first, so every pop waits on it from the start.
    async with fresh_connections(served.url) as c:
        r = await c.post("/api/v1/configure", json={"queue": queue, "options": {}})
        assert r.status_code in (200, 201), r.text
    await asyncio.wait_for(asyncio.gather(producer(), *(consumer() for _ in range(64))), 120)
    duplicated = [k for k, n in seen.items() if n > 1]
    assert not duplicated
    assert len(seen) == total  # 8 partitions x offsets 0..39: none skipped
    assert {o for _, o in seen} == set(range(40))
