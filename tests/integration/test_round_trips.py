"""Round trips to PostgreSQL per call, counted on the wire: a pop (also an empty one, also a
long poll's every re-check), an ack (of many messages over several partitions) and a
push's flush each cost exactly one.

The broker runs in-process (`Broker.open`) with a pool of one connection behind a proxy
that counts protocol round trips (tests/wire_counter.py). Each statement is run once before
counting: the first use of a statement on a connection also prepares it (one more trip).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from core.engine.ack import AckItem, GroupAck
from core.engine.pop import PopRequest, PopResult
from core.engine.push import PushItem
from core.engine.writes import NewMessage
from core.service import Broker
from core.settings import Settings
from tests.wire_counter import RoundTrips, counting_proxy

POOL = "queen-broker"  # application_name of the pool's connections


@pytest.fixture
async def counted(database_url: str) -> AsyncIterator[tuple[Broker, RoundTrips]]:
    async with counting_proxy(database_url) as (dsn, trips):
        # The counter flusher's own timer is kept out of the way: tests flush by hand.
        settings = Settings(db_pool_size=1, pop_wait_initial_interval_ms=50,
                            pop_wait_max_interval_ms=50, metrics_flush_ms=600_000)
        async with Broker.open(settings, dsn=dsn, migrate=False) as broker:
            yield broker, trips


async def _push(broker: Broker, queue: str, partition: str, n: int) -> None:
    outcomes = await broker.push([
        PushItem(queue, partition, NewMessage(uuid.uuid4(), f"{partition}-{i}", b'{"i": 1}'))
        for i in range(n)])
    assert [o.verdict.status for o in outcomes if o.verdict] == ["queued"] * n


async def _warm_up(broker: Broker, queue: str) -> None:
    """Prepare every statement the counted calls use on the pool's one connection."""
    await _push(broker, queue + "-warm", "w", 1)
    result = await broker.pop(PopRequest(group="warm", batch=1, queue=queue + "-warm"))
    await _ack_all(broker, "warm", result)
    await broker.pop(PopRequest(group="warm", batch=1, queue=queue + "-warm"))


async def _ack_all(broker: Broker, group: str, result: PopResult) -> list[bool]:
    acks = [GroupAck(group, AckItem(m.frame.transaction_id, str(m.partition_id), "completed",
                                    result.lease_id))
            for m in result.messages()]
    return [o.success for o in (await broker.ack_batch(acks)).outcomes]


async def test_a_pop_and_an_ack_of_its_messages_are_one_round_trip_each(
        counted: tuple[Broker, RoundTrips], queue_name: str) -> None:
    broker, trips = counted
    for partition in ("a", "b", "c"):
        await _push(broker, queue_name, partition, 5)
    await _warm_up(broker, queue_name)

    trips.reset()
    result = await broker.pop(PopRequest(group="g", batch=12, max_partitions=3,
                                         queue=queue_name))
    assert result.count == 12 and result.partitions_claimed == 3
    # The group's first pop on this process: it names the queue (and registers the
    # group), seeds the lane (one page here), then claims.
    assert trips.of(POOL) == 3

    trips.reset()
    assert await _ack_all(broker, "g", result) == [True] * 12
    assert trips.of(POOL) == 1

    trips.reset()
    empty = await broker.pop(PopRequest(group="g", batch=12, max_partitions=3,
                                        queue=queue_name))
    assert empty.count == 3  # the rest
    assert trips.of(POOL) == 1
    await _ack_all(broker, "g", empty)

    trips.reset()
    nothing = await broker.pop(PopRequest(group="g", batch=12, queue=queue_name))
    assert nothing.claims == [] and nothing.queue_ids  # an empty pop knows its queue
    assert trips.of(POOL) == 0  # the lane knows of nothing ready: no statement


async def _caught_up(broker: Broker, queue: str) -> PopRequest:
    """A pop request of group g on a queue whose only message g has consumed and acked."""
    await _push(broker, queue, "a", 1)
    await _warm_up(broker, queue)
    await _ack_all(broker, "g", await broker.pop(PopRequest(group="g", batch=5, queue=queue)))
    return PopRequest(group="g", batch=5, queue=queue)


async def test_an_empty_long_poll_costs_no_statement_while_nothing_changes(
        counted: tuple[Broker, RoundTrips], queue_name: str) -> None:
    """A caught-up group's lane knows of nothing ready: its long poll's looks (every 50 ms
    here) cost no statement (core/engine/ready)."""
    broker, trips = counted
    request = await _caught_up(broker, queue_name)
    assert (await broker.pop(request, wait=True, timeout_ms=200)).claims == []
    trips.reset()
    result = await broker.pop(request, wait=True, timeout_ms=400)
    assert result.claims == []
    assert trips.of(POOL) == 0


async def test_the_next_long_poll_of_a_line_that_found_nothing_costs_no_statement(
        counted: tuple[Broker, RoundTrips], queue_name: str) -> None:
    """A long poll whose (queue, partition, group) was last checked on this process and
    found empty, with nothing announced for the queue since, starts parked: an idle
    consumer polling again costs nothing (core/engine/ready). An announcement
    since (a push here) makes it check at once."""
    broker, trips = counted
    request = await _caught_up(broker, queue_name)
    first = asyncio.create_task(broker.pop(request, wait=True, timeout_ms=600))
    await asyncio.sleep(0.2)
    broker._hub.wake_everyone()  # a re-check now, knowing the queue's id: it finds nothing
    assert (await first).claims == []
    trips.reset()
    assert (await broker.pop(request, wait=True, timeout_ms=300)).claims == []
    assert trips.of(POOL) == 0
    await _push(broker, queue_name, "b", 1)
    trips.reset()
    result = await broker.pop(request, wait=True, timeout_ms=3000)
    assert result.count == 1
    assert trips.of(POOL) == 1


async def test_a_long_poll_waits_for_what_the_clock_holds_without_re_checks(
        counted: tuple[Broker, RoundTrips], queue_name: str) -> None:
    """A queue whose messages become claimable by time alone (here delayedProcessing: a
    message is visible a minute after its push; also windowBuffer, minPopWaitTime,
    retryDelay): the claim's verdict says until when, the ready set defers the partition to
    then, and a parked pop costs no statement meanwhile."""
    broker, trips = counted
    await broker.configure(queue=queue_name, namespace=None, task=None,
                           given={"delayedProcessing": 60}, replace=False)
    await _push(broker, queue_name, "a", 1)
    await _warm_up(broker, queue_name)
    request = PopRequest(group="g", batch=5, queue=queue_name)
    assert (await broker.pop(request, wait=True, timeout_ms=200)).claims == []
    statements = broker.reader.statements
    trips.reset()
    result = await broker.pop(request, wait=True, timeout_ms=400)
    assert result.claims == []
    assert broker.reader.statements == statements
    assert trips.of(POOL) == 0
    due = broker.reader.next_due(request)
    assert due is not None and 55 < due <= 60  # the message's minute, from its push


async def test_a_push_is_one_round_trip_per_flush(
        counted: tuple[Broker, RoundTrips], queue_name: str) -> None:
    broker, trips = counted
    await _warm_up(broker, queue_name)
    trips.reset()
    await _push(broker, queue_name, "new-partition", 10)  # creates queue and partition too
    assert trips.of(POOL) == 1


async def test_the_counter_sees_every_round_trip_of_a_transaction(
        counted: tuple[Broker, RoundTrips], queue_name: str) -> None:
    """The proxy counts what it should: a transaction is BEGIN, its statements, COMMIT."""
    broker, trips = counted
    await _warm_up(broker, queue_name)
    trips.reset()
    result = await broker.transaction(
        [PushItem(queue_name, "t", NewMessage(uuid.uuid4(), "tx-1", b"1"))], [])
    assert result.committed
    assert trips.of(POOL) == 3  # BEGIN, queen.append, COMMIT


async def test_counting_costs_the_pool_nothing_and_a_flush_is_two_round_trips(
        counted: tuple[Broker, RoundTrips], queue_name: str) -> None:
    """Pushes, pops and acks only count in memory; the counters reach the database on the
    flusher's own connection (`queen-broker-stats`): a read of which partitions exist, then
    one statement that writes them all (core/storage/stats.py says why two)."""
    broker, trips = counted
    await _warm_up(broker, queue_name)
    await _push(broker, queue_name, "seed", 1)  # the queue exists, g's lane is seeded
    await _ack_all(broker, "g", await broker.pop(PopRequest(group="g", batch=3,
                                                            queue=queue_name)))
    assert broker.flusher is not None
    assert await broker.flusher.flush()  # connects and prepares the statement
    trips.reset()
    await _push(broker, queue_name, "c", 3)
    result = await broker.pop(PopRequest(group="g", batch=3, queue=queue_name))
    assert await _ack_all(broker, "g", result) == [True] * 3
    assert trips.of(POOL) == 3  # the push's flush, the pop, the ack: nothing more
    assert broker.counters.peek()[(result.claims[0].partition_id, "delivered")] == 3
    pool_before = trips.of(POOL)
    assert await broker.flusher.flush()
    assert trips.of("queen-broker-stats") == 2 and trips.of(POOL) == pool_before
    trips.reset()
    assert await broker.flusher.flush()  # nothing counted per partition since: no read
    assert trips.of("queen-broker-stats") == 1
