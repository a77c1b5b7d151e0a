"""A stream cycle is one round trip to PostgreSQL (wire-protocol-extensions §18.3): state
ops, sink pushes to two partitions and the source ack in one statement, counted on the wire
(tests/wire_counter.py), as tests/integration/test_round_trips.py counts pushes and pops."""

from __future__ import annotations

import pytest

from core.engine.pop import PopRequest
from core.service import Broker, WritesPaused
from core.settings import Settings
from core.streams.cycle import Cycle, CycleAck, CyclePush, StateOp
from tests.integration.test_round_trips import POOL, _push, _warm_up, counted
from tests.support import create_database
from tests.wire_counter import RoundTrips

__all__ = ["counted"]  # the fixture, shared with test_round_trips


async def _one_cycle(broker: Broker, queue: str, query_id: str, n: int) -> Cycle:
    result = await broker.pop(PopRequest(group="streams.q", batch=n, queue=queue))
    assert result.count == n and result.lease_id is not None
    [message] = list(result.messages())[-1:]
    return Cycle(query_id, str(message.partition_id), "streams.q",
                 [StateOp(False, "k", '{"n": 1}'), StateOp(True, "old", "")],
                 [CyclePush(queue + "-sink", p, b'{"v": 1}') for p in ("x", "y")],
                 CycleAck(result.lease_id, True, True, n, message.frame.transaction_id))


async def test_a_cycle_with_state_pushes_and_an_ack_is_one_round_trip(
        counted: tuple[Broker, RoundTrips], queue_name: str) -> None:
    broker, trips = counted
    await _warm_up(broker, queue_name)
    reg = await broker.streams.register(name=queue_name, source_queue=queue_name,
                                        sink_queue=queue_name + "-sink", config_hash="h",
                                        reset=False)
    await _push(broker, queue_name, "a", 4)
    warm = await broker.streams.cycle(await _one_cycle(broker, queue_name, str(reg.query_id), 2))
    assert warm.success, warm.error  # prepares the statement

    cycle = await _one_cycle(broker, queue_name, str(reg.query_id), 2)
    trips.reset()
    result = await broker.streams.cycle(cycle)
    assert result.success and result.ack_count == 2
    assert [(s.partition, s.queued) for s in result.sinks] == [("x", 1), ("y", 1)]
    assert trips.of(POOL) == 1


async def test_while_pushes_are_in_maintenance_a_cycle_that_pushes_is_refused_whole(
        pg_server_url: str, queue_name: str) -> None:
    """A cycle cannot go to the spool (its pushes and its ack commit together): refused
    with 503 + Retry-After (WritesPaused), nothing applied; a cycle without pushes runs."""
    database = await create_database(pg_server_url)  # the switch is per database
    async with Broker.open(Settings(db_pool_size=2), dsn=database) as broker:
        reg = await broker.streams.register(name=queue_name, source_queue=queue_name,
                                            sink_queue=None, config_hash="h", reset=False)
        await _push(broker, queue_name, "a", 2)
        await broker.set_maintenance(push=True)
        cycle = await _one_cycle(broker, queue_name, str(reg.query_id), 2)
        with pytest.raises(WritesPaused):
            await broker.streams.cycle(cycle)
        rows = await broker.streams.state_get(query_id=str(reg.query_id),
                                              partition_id=cycle.partition_id, keys=[],
                                              key_prefix="", ripe_at_or_before=None)
        assert rows == []
        cycle.pushes = []
        result = await broker.streams.cycle(cycle)
        assert result.success and result.ack_count == 2 and result.state_ops_applied == 2
        await broker.set_maintenance(push=False)
