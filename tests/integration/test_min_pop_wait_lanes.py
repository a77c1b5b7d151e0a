"""A queue whose minPopWaitTime holds its under-full partitions: its empty pops claim each
held partition once, not at every pop (core/engine/ready/lane.py `hold`).
Whether minPopWaitTime holds a partition depends on the batch of the pop that reaches it,
so the reseed cannot give it a due as it gives a delayedProcessing one; a claim answered it
`later`, the lane deferred it, and a lane holding more partitions than its cap reseeds before
it answers nothing, marking them all ready again: every empty pop of such a queue of 5,000
partitions claimed them all (1,875 claim statements, 2 s a pop). The claim now says how many
messages a held partition has waiting, and the lane keeps it held, across reseeds, from pops
of a larger batch until its oldest message has waited long enough, or until a mark (a push)
says it changed; a pop of a batch it can fill still gets it."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from core.engine.pop import PopRequest
from core.engine.push import PushItem
from core.engine.ready.reader import Reader
from core.engine.ready.ready_set import ReadySet
from core.engine.writes import NewMessage
from core.service import Broker
from core.settings import Settings
from core.storage.database import Database
from tests.support import pop_all_after
from tests.two_brokers import push_partitions

pytestmark = pytest.mark.citus

PARTITIONS = 60
CAP = 16  # the lane's cap, far below the queue's partitions: every empty pop reseeds


async def _held(http: httpx.AsyncClient, queue: str, wait_ms: int) -> None:
    """A minPopWaitTime queue of PARTITIONS partitions of one message each."""
    r = await http.post("/api/v1/configure", json={
        "queue": queue, "options": {"minPopWaitTime": wait_ms}})
    assert r.status_code in (200, 201), r.text
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": f"p{n}", "payload": {"n": n}}
        for n in range(PARTITIONS)]})
    assert r.status_code == 201, r.text


async def test_a_min_pop_wait_queue_s_empty_pops_claim_its_held_partitions_once(
        http: httpx.AsyncClient, core_db: Database, queue_name: str) -> None:
    await _held(http, queue_name, 60_000)
    reader = Reader(core_db, ReadySet(core_db, lambda: 1, lane_cap=CAP))
    request = PopRequest(group="g", batch=2, queue=queue_name)  # one message: held
    for _ in range(2):  # a pop looks at three lanes' worth: two pops meet them all
        assert (await reader.pop(request)).count == 0
    learnt = reader.statements
    for _ in range(3):
        assert (await reader.pop(request)).count == 0
    # Before: each of these pops claimed every partition it met again (18 statements).
    assert reader.statements == learnt


async def test_held_partitions_are_delivered_once_their_oldest_message_waited(
        http: httpx.AsyncClient, core_db: Database, queue_name: str) -> None:
    await _held(http, queue_name, 2000)
    pushed = time.monotonic()
    reader = Reader(core_db, ReadySet(core_db, lambda: 1, lane_cap=CAP))
    request = PopRequest(group="g", batch=PARTITIONS + 1, max_partitions=PARTITIONS,
                         queue=queue_name, auto_ack=True)
    assert (await reader.pop(request)).count == 0  # it holds them all (0.8 s on Citus)
    got = await pop_all_after(reader, request, ready_at=pushed + 2.2, expected=PARTITIONS)
    assert got == PARTITIONS


async def test_a_partition_held_from_a_larger_batch_goes_to_a_pop_of_a_batch_it_fills(
        http: httpx.AsyncClient, core_db: Database, queue_name: str) -> None:
    """Within the lane's cap too: the lane deferred a partition a claim answered `later`
    for every pop, so a pop of one answered nothing after a pop of two was held."""
    r = await http.post("/api/v1/configure", json={
        "queue": queue_name, "options": {"minPopWaitTime": 60_000}})
    assert r.status_code in (200, 201), r.text
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue_name, "partition": "p", "payload": {}}]})
    assert r.status_code == 201, r.text
    reader = Reader(core_db, ReadySet(core_db, lambda: 1))
    assert (await reader.pop(PopRequest(group="g", batch=2, queue=queue_name))).count == 0
    assert (await reader.pop(PopRequest(group="g", batch=1, queue=queue_name))).count == 1


async def test_a_held_partition_goes_to_a_batch_it_fills_and_to_one_a_push_filled(
        database_url: str, queue_name: str) -> None:
    """Held from pops of two, a partition of one message goes to a pop of one at once; and a
    second message pushed to it (its mark lifts the hold) makes a pop of two take both."""
    settings = Settings(db_pool_size=2, metrics_flush_ms=600_000)
    async with Broker.open(settings, dsn=database_url, migrate=False) as broker:
        broker.ready._lane_cap = CAP
        await broker.configure(queue=queue_name, namespace=None, task=None,
                               given={"minPopWaitTime": 60_000}, replace=False)
        await push_partitions(broker, queue_name, [f"p{n}" for n in range(PARTITIONS)])
        two = PopRequest(group="g", batch=2, queue=queue_name, auto_ack=True)
        for _ in range(2):
            assert (await broker.pop(two)).count == 0
        learnt = broker.reader.statements
        assert (await broker.pop(two)).count == 0
        assert broker.reader.statements == learnt  # all held from pops of two
        one = await broker.pop(PopRequest(group="g", batch=1, queue=queue_name,
                                          auto_ack=True))
        assert one.count == 1  # a batch of one it fills
        target = "p8" if one.claims[0].partition == "p7" else "p7"
        await broker.push([PushItem(queue_name, target, NewMessage(
            uuid.uuid4(), uuid.uuid4().hex, b"{}"))])
        got = [(c.partition, c.end - c.start + 1) for c in (await broker.pop(two)).claims]
        assert got == [(target, 2)]


async def test_racing_pops_of_one_take_every_held_partition_once_and_pops_of_two_none(
        database_url: str, queue_name: str) -> None:
    """Pops of two and pops of one at once, in one process whose lane holds far fewer
    partitions than the queue has: the holds a pop of two files while a pop of one looks at
    the same lane must not keep a partition from the pop of one (nor give it twice), and no
    partition of one message goes to a pop of two before its minute of minPopWaitTime."""
    settings = Settings(db_pool_size=6, metrics_flush_ms=600_000)
    async with Broker.open(settings, dsn=database_url, migrate=False) as broker:
        broker.ready._lane_cap = CAP
        await broker.configure(queue=queue_name, namespace=None, task=None,
                               given={"minPopWaitTime": 60_000}, replace=False)
        names = [f"p{n}" for n in range(PARTITIONS)]
        await push_partitions(broker, queue_name, names)
        two = PopRequest(group="g", batch=2, queue=queue_name, auto_ack=True)
        one = PopRequest(group="g", batch=1, queue=queue_name, auto_ack=True)
        to_one: list[str] = []
        to_two: list[str] = []
        # Three pops of one take at most three a round: twenty rounds if none comes back
        # empty; the rest of the allowance is for rounds whose pops met each other's claims.
        for _ in range(3 * PARTITIONS):
            results = await asyncio.gather(*(broker.pop(two) for _ in range(3)),
                                           *(broker.pop(one) for _ in range(3)))
            to_two += [c.partition for r in results[:3] for c in r.claims]
            to_one += [c.partition for r in results[3:] for c in r.claims]
            assert all(c.count == 1 for r in results[3:] for c in r.claims)
            if len(to_one) >= PARTITIONS or to_two:
                break
        assert to_two == []
        assert sorted(to_one) == sorted(names)  # each once
