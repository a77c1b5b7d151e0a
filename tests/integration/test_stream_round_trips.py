"""A stream cycle is one round trip to PostgreSQL (wire-protocol-extensions §18.3): state
ops, sink pushes to two partitions and the source ack in one statement, counted on the wire
(tests/wire_counter.py), as tests/integration/test_round_trips.py counts pushes and pops."""

from __future__ import annotations

from core.pop import PopRequest
from core.service import Broker
from core.storage.streams import CycleAck, StateOp
from core.streams.cycle import Cycle, CyclePush
from tests.integration.test_round_trips import POOL, _push, _warm_up, counted
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
