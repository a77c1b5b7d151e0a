"""Wake-up announcements cost few NOTIFY statements and lose no wake-up (core/engine/listener.py).

Every NOTIFY is a transaction on the database (on Citus, the worker its queue's notifications go
to: core/engine/wake_nodes.py) and a signal to every
listening session, whatever it carries. So what gathers while one is in flight goes out as the
next; and a pop's claim is hearsay that nobody waits for, so no answer is held back by it, and
it waits a moment for a wake-up to go with (a consumer's ack of what it popped, usually).

Two in-process brokers over one database stand for two web workers, each with its own LISTEN
and NOTIFY connections. B's parked pops look by themselves only every 5 s, so a pop answered
sooner was woken by A's notification.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import psutil
import pytest

from core.engine import listener
from core.engine.ack import AckItem, GroupAck
from core.engine.pop import PopRequest, PopResult
from core.engine.wakeup import CHANNEL, CLAIMED_CHANNEL, decode_payload
from core.service import Broker
from core.settings import Settings
from tests.support import wait_for, wake_link
from tests.two_brokers import listening_pair, push_partitions

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus

LOOK_S = 5.0  # how often a parked pop looks by itself
SETTINGS = Settings(db_pool_size=4, pop_wait_initial_interval_ms=int(LOOK_S * 1000),
                    pop_wait_max_interval_ms=int(LOOK_S * 1000), metrics_flush_ms=600_000)


@pytest.fixture
async def pair(database_url: str) -> AsyncIterator[tuple[Broker, Broker]]:
    async with listening_pair(SETTINGS, database_url) as brokers:
        yield brokers


async def _parked(broker: Broker, request: PopRequest) -> asyncio.Task[PopResult]:
    parked = broker._hub.parked_count
    task = asyncio.create_task(broker.pop(request, wait=True, timeout_ms=20_000))

    async def settled() -> bool:  # parked after its first (empty) look
        return broker._hub.parked_count > parked
    await wait_for(settled)
    return task


async def test_a_burst_of_pushes_costs_fewer_notifies_than_pushes_and_wakes_every_pop_elsewhere(
        pair: tuple[Broker, Broker], queue_name: str, db: asyncpg.Connection) -> None:
    """40 concurrent pushes on A, one partition each: B's 6 parked pops are all answered by
    A's notifications, and A sent fewer NOTIFY statements than pushes (counted by A and by a
    LISTEN session of our own), which together name every push. A's NOTIFY session is held
    still (SIGSTOP) for half a second as the burst begins, so that announcements surely
    gather behind the one in flight (left to timing, a NOTIFY faster than the pushes'
    commits may go out once per push)."""
    a, b = pair
    await push_partitions(a, queue_name, ["seed"])
    request = PopRequest(group="g", batch=1, queue=queue_name, auto_ack=True)
    assert (await b.pop(request)).count == 1  # B knows the queue, and that it is empty
    link = await wake_link(a._hub, db, queue_name)
    notifier = link.notifier_pid
    heard: list[tuple[int, int]] = []

    def count(conn: Any, pid: int, channel: str, payload: object) -> None:
        if pid == notifier:
            queue_id, n, _, _ = decode_payload(str(payload))
            heard.append((queue_id, n))
    assert notifier is not None
    if not psutil.pid_exists(notifier):
        pytest.skip("the database server runs on another host")
    node = await asyncpg.connect(link.dsn)  # on Citus, the worker the queue's go to
    await node.add_listener(CHANNEL, count)
    try:
        await _burst(a, b, request, queue_name, heard, notifier)
    finally:
        await node.close()


async def _burst(a: Broker, b: Broker, request: PopRequest, queue_name: str,
                 heard: list[tuple[int, int]], notifier: int) -> None:
    waiting = [await _parked(b, request) for _ in range(6)]
    statements = a._hub.notify_statements

    pushes = [f"p{i}" for i in range(40)]
    os.kill(notifier, signal.SIGSTOP)
    asyncio.get_running_loop().call_later(0.5, os.kill, notifier, signal.SIGCONT)
    try:
        await asyncio.gather(*(push_partitions(a, queue_name, [p]) for p in pushes))
    finally:
        os.kill(notifier, signal.SIGCONT)
    pushed_at = time.monotonic()
    results = await asyncio.wait_for(asyncio.gather(*waiting), 10)
    woken_within = time.monotonic() - pushed_at
    assert all(r.count == 1 for r in results)
    assert woken_within < LOOK_S / 2, "a pop waited for its own look, not for a wake-up"

    sent = a._hub.notify_statements - statements
    assert 1 <= sent < len(pushes)

    async def all_heard() -> bool:  # the wake-ups name every push between them
        return sum(n for _, n in heard) >= len(pushes)
    await wait_for(all_heard)
    assert len(heard) == sent  # one wake-up notification per statement (one queue)


async def test_an_ack_that_frees_nothing_does_not_wait_for_a_claim_in_flight(
        pair: tuple[Broker, Broker], queue_name: str, db: asyncpg.Connection) -> None:
    """Nothing waits for a claim's announcement: with A's NOTIFY session held still
    (SIGSTOP), a claim's NOTIFY cannot complete, and an ack that makes nothing deliverable
    is still answered at once (it used to wait for the claim, up to 2 s)."""
    a, _ = pair
    await push_partitions(a, queue_name, ["p", "q"])
    first = await a.pop(PopRequest(group="g", batch=1, queue=queue_name, partition="p"))
    [message] = first.messages()
    notifier = (await wake_link(a._hub, db, queue_name)).notifier_pid
    assert notifier is not None
    if not psutil.pid_exists(notifier):
        pytest.skip("the database server runs on another host")
    os.kill(notifier, signal.SIGSTOP)
    try:
        second = await a.pop(PopRequest(group="g", batch=1, queue=queue_name, partition="q"))
        assert second.count == 1  # its claim is announced: the NOTIFY hangs
        [outcome] = (await asyncio.wait_for(a.ack_batch([GroupAck("g", AckItem(
            message.frame.transaction_id, str(message.partition_id), "completed",
            first.lease_id))]), 0.5)).outcomes
    finally:
        os.kill(notifier, signal.SIGCONT)
    assert outcome.success


async def test_a_notify_session_that_hangs_holds_back_answers_once_and_wake_ups_go_on(
        pair: tuple[Broker, Broker], queue_name: str, db: asyncpg.Connection) -> None:
    """A's NOTIFY session for the queue is held still (SIGSTOP) for the whole test, as a
    frozen server would hold it: a push is answered only once its wake-up is published, and
    every push used to wait the 2 s cap while the NOTIFY hung. Now a NOTIFY that does not
    commit within a second is given up and sent again, on a new session or (on Citus)
    through another worker: of six pushes in a row only the first waits, and a pop parked on
    B is woken by a push long before its own look."""
    a, b = pair
    await push_partitions(a, queue_name, ["seed"])
    request = PopRequest(group="g", batch=1, queue=queue_name, auto_ack=True)
    assert (await b.pop(request)).count == 1  # B knows the queue, and that it is empty
    link = await wake_link(a._hub, db, queue_name)
    await push_partitions(a, queue_name, ["warm"])  # the notifier session is open
    assert (await b.pop(request)).count == 1
    notifier = link.notifier_pid
    assert notifier is not None
    if not psutil.pid_exists(notifier):
        pytest.skip("the database server runs on another host")
    os.kill(notifier, signal.SIGSTOP)
    try:
        started = time.monotonic()
        for i in range(6):
            await push_partitions(a, queue_name, [f"p{i}"])
        pushing = time.monotonic() - started
        assert pushing < 6.0, f"six pushes took {pushing:.1f} s: each waited for the NOTIFY"
        for _ in range(6):
            assert (await b.pop(request)).count == 1

        waiting = await _parked(b, request)
        await push_partitions(a, queue_name, ["late"])
        pushed_at = time.monotonic()
        result = await asyncio.wait_for(waiting, 10)
        assert result.count == 1
        assert time.monotonic() - pushed_at < LOOK_S / 2, "woken by its own look"
    finally:
        os.kill(notifier, signal.SIGCONT)


async def _heard_from(hub_owner: Broker, db: asyncpg.Connection, queue: str,
                      heard: list[tuple[float, str]]) -> asyncpg.Connection:
    """A LISTEN session of our own on the node `hub_owner` sends the queue's notifications
    to, noting (when, channel) of each of its notifications."""
    link = await wake_link(hub_owner._hub, db, queue)

    def note(conn: Any, pid: int, channel: str, payload: object) -> None:
        if pid == link.notifier_pid:
            heard.append((time.monotonic(), channel))
    node = await asyncpg.connect(link.dsn)
    await node.add_listener(CHANNEL, note)
    await node.add_listener(CLAIMED_CHANNEL, note)
    return node


async def test_a_pop_and_the_ack_that_releases_its_partition_cost_one_notify(
        pair: tuple[Broker, Broker], queue_name: str, db: asyncpg.Connection,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer pops one message of p and acks it; p holds another, so the ack releases
    it for the others. The pop's claim and the ack's release go in one NOTIFY (two before:
    the claim's went at once), the claim first (B holds p back, then hears it is free again
    and takes it). The claim waits 5 s for company here, so that the test does not depend on
    how soon the ack follows the pop."""
    monkeypatch.setattr(listener, "_CLAIMS_GATHER_SECONDS", 5.0, raising=False)
    a, b = pair
    await push_partitions(a, queue_name, ["p", "p"])
    heard: list[tuple[float, str]] = []
    node = await _heard_from(a, db, queue_name, heard)
    try:
        statements = a._hub.notify_statements
        held = await a.pop(PopRequest(group="g", batch=1, queue=queue_name))
        [message] = held.messages()
        await asyncio.sleep(0.05)  # time enough for a NOTIFY of the claim alone
        [outcome] = (await a.ack_batch([GroupAck("g", AckItem(
            message.frame.transaction_id, str(message.partition_id), "completed",
            held.lease_id))])).outcomes
        assert outcome.success and outcome.lease_released
        assert a._hub.notify_statements == statements + 1

        async def both_heard() -> bool:
            return len(heard) >= 2
        await wait_for(both_heard)
        assert [channel for _, channel in heard] == [CLAIMED_CHANNEL, CHANNEL]
        assert heard[0][0] == pytest.approx(heard[1][0], abs=0.04)  # one statement
    finally:
        await node.close()
    taken = await b.pop(PopRequest(group="g", batch=1, queue=queue_name))
    assert [m.offset for m in taken.messages()] == [1]


async def test_a_claim_with_no_wake_up_to_go_with_goes_alone_after_a_moment(
        pair: tuple[Broker, Broker], queue_name: str, db: asyncpg.Connection,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing follows the pop: its claim is not lost, it goes alone once the wait for
    company is over (0.5 s here), and B holds the partition back on hearing it."""
    monkeypatch.setattr(listener, "_CLAIMS_GATHER_SECONDS", 0.5, raising=False)
    a, b = pair
    await push_partitions(a, queue_name, ["p", "q"])
    request = PopRequest(group="g", batch=1, queue=queue_name)
    assert (await b.pop(dataclasses.replace(request, partition="q"))).count == 1  # B's lane
    heard: list[tuple[float, str]] = []
    node = await _heard_from(a, db, queue_name, heard)
    try:
        statements = a._hub.notify_statements
        held = await a.pop(dataclasses.replace(request, partition="p"))
        popped_at = time.monotonic()
        [claim] = held.claims
        lane = b.ready.lane(claim.queue_id, "g")

        async def held_back() -> bool:
            return claim.partition_id not in lane.ready_ids and bool(heard)
        await wait_for(held_back)
        assert [channel for _, channel in heard] == [CLAIMED_CHANNEL]
        assert heard[0][0] - popped_at >= 0.4  # it waited for company first
        assert a._hub.notify_statements == statements + 1
    finally:
        await node.close()
