"""A push that a waiting pop of its own process takes does not also wake that group's waiting
pops in the other processes (core/engine/listener.py): they would race for the one span and all but
one would run a claim that finds nothing. What the local pop leaves is still announced.

Two in-process brokers over one database stand for two web workers: each has its own wake-up
hub (LISTEN and NOTIFY connections), pool and ready set, whose claim statements are counted.
Their parked pops' looks are set far out (5 s), so every claim seen here is a wake-up's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from core.engine.pop import PopRequest, PopResult
from core.service import Broker
from core.settings import Settings
from tests.support import wait_for
from tests.two_brokers import listening_pair, push_partitions

SETTINGS = Settings(db_pool_size=2, pop_wait_initial_interval_ms=5000,
                    pop_wait_max_interval_ms=5000, metrics_flush_ms=600_000)


@pytest.fixture
async def pair(database_url: str) -> AsyncIterator[tuple[Broker, Broker]]:
    async with listening_pair(SETTINGS, database_url) as brokers:
        yield brokers


async def _parked(broker: Broker, request: PopRequest) -> asyncio.Task[PopResult]:
    parked = broker._hub.parked_count
    task = asyncio.create_task(broker.pop(request, wait=True, timeout_ms=20_000))

    async def settled() -> bool:  # parked after its first (empty) look
        return broker._hub.parked_count > parked and (  # routes are keyed by tenant first
            request.tenant, request.queue, None, None, request.group) in broker.reader._routes
    await wait_for(settled)
    return task


async def test_a_span_a_local_pop_took_wakes_no_pop_of_its_group_elsewhere(
        pair: tuple[Broker, Broker], queue_name: str) -> None:
    a, b = pair
    await push_partitions(a, queue_name, ["p0"])  # the queue exists; its message is taken at once
    for group in ("g", "h"):
        assert (await a.pop(PopRequest(group=group, batch=10, queue=queue_name))).count == 1
    request = PopRequest(group="g", batch=10, queue=queue_name)
    on_a, on_b = await _parked(a, request), await _parked(b, request)
    b_claims = b.reader.statements
    other_group = await _parked(b, PopRequest(group="h", batch=10, queue=queue_name))
    h_claims = b.reader.statements

    await push_partitions(a, queue_name, ["p1"])
    assert (await asyncio.wait_for(on_a, 10)).count == 1
    result = await asyncio.wait_for(other_group, 10)  # group h is woken on b as before
    assert result.count == 1
    await asyncio.sleep(0.5)  # b's g waiter was told within milliseconds, if at all
    assert not on_b.done()
    assert b.reader.statements - h_claims == 1, "b's g waiter ran a claim"  # h's only
    assert h_claims > b_claims  # (the counter does count b's claims)
    on_b.cancel()


async def test_what_the_local_pop_leaves_still_wakes_the_others(
        pair: tuple[Broker, Broker], queue_name: str) -> None:
    """Two spans, and a's waiting pop takes one partition: b's waiter is woken for the
    other."""
    a, b = pair
    await push_partitions(a, queue_name, ["p0"])
    assert (await a.pop(PopRequest(group="g", batch=10, queue=queue_name))).count == 1
    one_partition = PopRequest(group="g", batch=10, max_partitions=1, queue=queue_name)
    on_a, on_b = await _parked(a, one_partition), await _parked(b, one_partition)
    await push_partitions(a, queue_name, ["p1", "p2"])
    got_a = await asyncio.wait_for(on_a, 10)
    got_b = await asyncio.wait_for(on_b, 10)
    assert {m.partition_id for m in got_a.messages()} != {m.partition_id for m in got_b.messages()}
    assert got_a.count == 1 and got_b.count == 1


async def test_a_local_pop_whose_client_left_does_not_count_as_served(
        pair: tuple[Broker, Broker], queue_name: str) -> None:
    """a's waiting pop's client leaves before the push: the pop leaves a's line at once and
    claims nothing, so a's notification reports no served g pop and b's waiter gets the
    message. (A client leaving between the wake and the claim falls back on b's backoff
    re-check; that interleaving is not forced here.)"""
    a, b = pair
    await push_partitions(a, queue_name, ["p0"])
    assert (await a.pop(PopRequest(group="g", batch=10, queue=queue_name))).count == 1
    request = PopRequest(group="g", batch=10, queue=queue_name)
    gone = asyncio.Event()
    parked = a._hub.parked_count
    on_a = asyncio.create_task(a.pop(request, wait=True, timeout_ms=20_000, gone=gone))

    async def settled() -> bool:
        return a._hub.parked_count > parked
    await wait_for(settled)
    on_b = await _parked(b, request)
    gone.set()  # the client left; a's pop notices only when woken
    await push_partitions(a, queue_name, ["p1"])
    assert (await asyncio.wait_for(on_a, 10)).claims == []
    assert (await asyncio.wait_for(on_b, 15)).count == 1
