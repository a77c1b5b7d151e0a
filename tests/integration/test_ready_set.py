"""The ready set across processes (core/engine/ready): two in-process brokers over one
database stand for two broker hosts, each with its own listener, ready set and reader.

- a push on A is delivered by a pop on B within the wake-up latency (the notification);
- a caught-up group's re-polls cost B no statement;
- a notification lost without trace is made up by the periodic reseed, within
  READY_RESEED_INTERVAL_MS (+10 % jitter) of the lane's last seed: the worst case;
- a lost LISTEN connection makes B reseed before it trusts its lanes again.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator

import asyncpg
import psutil
import pytest

from core.engine.ack import AckItem, GroupAck
from core.engine.pop import PopRequest
from core.service import Broker
from core.settings import Settings
from tests.support import wait_for, wake_link
from tests.two_brokers import listening_pair, push_partitions

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus

RESEED_S = 1.5
SETTINGS = Settings(db_pool_size=2, metrics_flush_ms=600_000,
                    ready_reseed_interval_ms=int(RESEED_S * 1000))


@pytest.fixture
async def pair(database_url: str) -> AsyncIterator[tuple[Broker, Broker]]:
    async with listening_pair(SETTINGS, database_url) as brokers:
        yield brokers


def _silenced(broker: Broker) -> None:
    """The broker's announcements are lost: nobody else hears of its commits."""
    broker._hub.announce = lambda wakes: None  # type: ignore[method-assign]


async def test_a_push_on_one_broker_is_popped_on_the_other_at_its_notification(
        pair: tuple[Broker, Broker], queue_name: str) -> None:
    a, b = pair
    await push_partitions(a, queue_name, ["seed"])
    request = PopRequest(group="g", batch=10, queue=queue_name, auto_ack=True)
    assert (await b.pop(request)).count == 1  # B's lane is seeded and trusted
    waiting = asyncio.create_task(b.pop(request, wait=True, timeout_ms=10_000))
    await asyncio.sleep(0.2)  # parked
    started = time.monotonic()
    await push_partitions(a, queue_name, ["p1"])
    result = await waiting
    latency = time.monotonic() - started
    assert [c.partition for c in result.claims] == ["p1"]
    # The notification's latency, far below the periodic reseed and the parked pop's look.
    assert latency < 0.9


async def test_a_caught_up_group_re_polls_without_a_statement(
        pair: tuple[Broker, Broker], queue_name: str) -> None:
    a, b = pair
    await push_partitions(a, queue_name, [f"p{i}" for i in range(20)])
    request = PopRequest(group="g", batch=100, max_partitions=20, queue=queue_name,
                         auto_ack=True)
    got = 0
    for _ in range(5):
        got += (await b.pop(request)).count
    assert got == 20
    statements = b.reader.statements
    for _ in range(50):
        assert (await b.pop(request)).count == 0
    assert b.reader.statements == statements  # 50 quiet polls, no statement
    await push_partitions(a, queue_name, ["p3"])
    delivered = 0

    async def arrived() -> bool:
        nonlocal delivered
        delivered += (await b.pop(request)).count
        return delivered == 1
    await wait_for(arrived)
    assert b.reader.statements == statements + 1  # the one statement that claimed it


async def test_a_lost_notification_is_found_by_the_periodic_reseed(
        pair: tuple[Broker, Broker], queue_name: str) -> None:
    a, b = pair
    await push_partitions(a, queue_name, ["seed"])
    request = PopRequest(group="g", batch=10, queue=queue_name, auto_ack=True)
    assert (await b.pop(request)).count == 1
    # A route is keyed by tenant ('' the default), queue, namespace, task and group.
    route = b.reader._routes[("", queue_name, None, None, "g")]
    lane = b.ready.lane(route.queue_ids[0], "g")
    assert lane.seeded_at is not None
    _silenced(a)
    await push_partitions(a, queue_name, ["lost"])
    pushed = time.monotonic()
    # B cannot know yet (a hint, not the authority)...
    assert (await b.pop(request)).count == 0
    found_at = None
    while time.monotonic() - pushed < RESEED_S * 1.1 + 2.0:
        if (await b.pop(request)).count:
            found_at = time.monotonic()
            break
        await asyncio.sleep(0.02)
    assert found_at is not None
    # ...but within the reseed interval (+10 % jitter) of the lane's last seed.
    assert found_at - lane.seeded_at <= RESEED_S * 1.1 + 0.5


async def test_a_lost_listen_connection_makes_the_lanes_reseed_before_they_are_trusted(
        pair: tuple[Broker, Broker], queue_name: str, db: asyncpg.Connection) -> None:
    a, b = pair
    await push_partitions(a, queue_name, ["seed"])
    request = PopRequest(group="g", batch=10, queue=queue_name, auto_ack=True)
    assert (await b.pop(request)).count == 1
    session = b._hub.session()
    _silenced(a)
    await db.execute("SELECT pg_terminate_backend($1::integer)", b._hub.listener_pid)
    await push_partitions(a, queue_name, ["missed"])  # announced to nobody while B reconnects

    async def reconnected() -> bool:
        return b._hub.session() not in (None, session)
    await wait_for(reconnected)
    reseeds = b.ready.reseeds
    result = await b.pop(request)  # well before the periodic reseed
    assert [c.partition for c in result.claims] == ["missed"]
    assert b.ready.reseeds == reseeds + 1


async def test_a_partition_claimed_on_one_broker_is_not_tried_by_the_other(
        pair: tuple[Broker, Broker], queue_name: str) -> None:
    """A's claim is announced: B holds the partition back in that group's ready set, so B's
    pops that have other candidates do not spend a statement finding it leased; a pop about
    to answer nothing checks it once (A's word may be older than its release), and then
    knows from the tables until when it is leased. Its release (an ack that leaves
    messages behind) is announced and B takes the rest."""
    a, b = pair
    await push_partitions(a, queue_name, ["seed"])
    request = PopRequest(group="g", batch=1, queue=queue_name, auto_ack=True)
    assert (await b.pop(request)).count == 1  # B's lane is seeded
    assert (await b.pop(request)).count == 0  # (and knows "seed" is empty: autoAck took it)
    await push_partitions(a, queue_name, ["p", "p"])
    leased = PopRequest(group="g", batch=1, queue=queue_name)
    held = await a.pop(leased)
    assert [c.partition for c in held.claims] == ["p"]
    lane = b.ready.lane(held.claims[0].queue_id, "g")

    async def dropped() -> bool:
        return held.claims[0].partition_id not in lane.ready_ids
    await wait_for(dropped)
    await push_partitions(a, queue_name, ["q"])

    async def heard() -> bool:
        return bool(lane.ready_ids)
    await wait_for(heard)
    statements = b.reader.statements
    other = await b.pop(leased)
    assert [c.partition for c in other.claims] == ["q"]
    assert b.reader.statements == statements + 1  # "p" not tried: B heard it was taken
    statements = b.reader.statements
    assert (await b.pop(leased)).count == 0
    assert b.reader.statements == statements + 1  # A's word checked before a 204
    assert (await b.pop(leased)).count == 0
    assert b.reader.statements == statements + 1  # then known: leased until its end
    [message] = held.messages()
    [outcome] = (await a.ack_batch([GroupAck("g", AckItem(
        message.frame.transaction_id, str(message.partition_id), "completed",
        held.lease_id))])).outcomes
    assert outcome.success
    rest = await b.pop(leased, wait=True, timeout_ms=5000)
    assert [(c.partition, c.start) for c in rest.claims] == [("p", 1)]


async def test_a_lane_holds_at_most_its_cap_and_still_finds_every_partition(
        database_url: str, queue_name: str) -> None:
    """A client naming ever new groups must not fill the process: a lane holds at most
    LANE_CAP ready partitions and the process at most MAX_LANES lanes. A lane that left
    partitions out goes on looking before it answers nothing (204 keeps its meaning)."""
    settings = Settings(db_pool_size=2, metrics_flush_ms=600_000)
    async with Broker.open(settings, dsn=database_url, migrate=False) as broker:
        broker.ready._lane_cap = 7
        broker.ready._max_lanes = 3
        await push_partitions(broker, queue_name, [f"p{i}" for i in range(20)])
        request = PopRequest(group="g", batch=1, queue=queue_name, auto_ack=True)
        got = []
        for _ in range(25):  # non-waiting pops, one partition each
            result = await broker.pop(request)
            got += [c.partition for c in result.claims]
            lane = broker.ready.lane(result.queue_ids[0], "g")
            assert len(lane.ready_ids) <= 7
        assert sorted(got) == sorted(f"p{i}" for i in range(20))  # each once, none missed
        for group in ("a", "b", "c", "d", "e"):  # more groups than lanes allowed
            assert (await broker.pop(PopRequest(group=group, batch=1,
                                                queue=queue_name))).count == 1
        assert len(broker.ready._lanes) <= 3


async def test_an_announcement_whose_notify_failed_is_sent_again_before_the_push_answers(
        pair: tuple[Broker, Broker], queue_name: str, db: asyncpg.Connection) -> None:
    """A's NOTIFY connection is cut: the push that follows is answered only once its
    announcement went out on a new connection, so B's next pop delivers it."""
    a, b = pair
    await push_partitions(a, queue_name, ["seed"])
    request = PopRequest(group="g", batch=1, queue=queue_name, auto_ack=True)
    assert (await b.pop(request)).count == 1  # B's lane is seeded and trusted
    assert (await b.pop(request)).count == 0
    link = await wake_link(a._hub, db, queue_name)
    notifier = link.notifier_pid
    assert notifier is not None
    node = await asyncpg.connect(link.dsn)  # on Citus, the worker the queue's go to
    try:
        assert await node.fetchval("SELECT pg_terminate_backend($1::integer)", notifier)
    finally:
        await node.close()
    await push_partitions(a, queue_name, ["after-cut"])
    assert link.notifier_pid != notifier  # sent again on a new connection
    result = await b.pop(request)
    assert [c.partition for c in result.claims] == ["after-cut"]


async def test_a_pop_about_to_answer_nothing_first_hears_what_is_on_its_way(
        pair: tuple[Broker, Broker], queue_name: str, db: asyncpg.Connection) -> None:
    """B's LISTEN session is held still (SIGSTOP) while A's push commits and is announced:
    the notification has not left PostgreSQL when B's pop finds nothing. B's pop waits for
    a round trip on its LISTEN connection before it answers, which brings the notification
    with it once the session runs again. (On Citus, the session on the worker the queue's
    notifications go to: the round trip is made on every node's.)"""
    a, b = pair
    await push_partitions(a, queue_name, ["seed"])
    request = PopRequest(group="g", batch=1, queue=queue_name, auto_ack=True)
    assert (await b.pop(request)).count == 1  # B's lane is seeded and trusted
    assert (await b.pop(request)).count == 0
    assert (await wake_link(a._hub, db, queue_name)).dsn == \
        (await wake_link(b._hub, db, queue_name)).dsn
    session = (await wake_link(b._hub, db, queue_name)).listener_pid
    assert session is not None
    if not psutil.pid_exists(session):
        pytest.skip("the database server runs on another host")
    os.kill(session, signal.SIGSTOP)
    try:
        await push_partitions(a, queue_name, ["on-its-way"])
        asyncio.get_running_loop().call_later(0.3, os.kill, session, signal.SIGCONT)
        result = await b.pop(request)
    finally:
        os.kill(session, signal.SIGCONT)
    assert [c.partition for c in result.claims] == ["on-its-way"]
