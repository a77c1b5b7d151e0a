"""A few seconds of the load generator against the session broker: the gate only, no speed.

Checks that the harness itself is trustworthy (every acknowledged push is found exactly once)
and that the broker loses nothing under concurrent producers and consumers.
"""

from __future__ import annotations

import asyncio
import uuid

import msgspec
import pytest

from loadtest.cell import summarize
from loadtest.drain import fetch_all
from loadtest.gate import Bitmaps, check
from loadtest.httpc import Connection
from loadtest.runner import Shape, run_cell
from loadtest.warm import warm
from loadtest.wire import WIRES
from tests.support import BrokerProcess


def test_gate_counts_missing_duplicated_and_unexpected_messages() -> None:
    pushed, delivered = Bitmaps(), Bitmaps()
    for seq in range(5):
        pushed.mark(1, seq)
    for seq in (0, 1, 1, 3, 7):
        delivered.mark(1, seq)
    result = check("g", pushed, delivered, uncertain=0)
    assert (result.missing, result.duplicated, result.unexpected) == (2, 1, 1)
    assert result.delivered == 3 and not result.passed


def _a_producer_that_dies(*args: object) -> None:
    raise SystemExit(3)  # gives no result, as a producer killed by the machine would


def test_a_cell_whose_producer_dies_fails_its_gate_though_nothing_is_missing(
        broker: BrokerProcess) -> None:
    # Nothing was pushed, so nothing is missing: the gate alone would pass. The runner counts
    # the load process that gave no result, and the cell fails on it.
    shape = Shape(queue="smoke-dies-" + uuid.uuid4().hex[:8], duration=1, connections=1,
                  batch=1, partitions=1, producer_procs=1, consumer_procs=0)
    out = run_cell(broker.url, shape, {}, "smoke dies", producer_fn=_a_producer_that_dies)
    assert out.pushed.count() == 0 and out.lost_processes == 1
    cell = summarize(out, shape, "smoke dies", None, None, None, True)
    assert cell["verdict"] == "FAILURE" and cell["gate"]["lost_processes"] == 1


def test_push_only_cell_stores_every_acknowledged_message_once(broker: BrokerProcess) -> None:
    queue = "smoke-push-" + uuid.uuid4().hex[:8]
    shape = Shape(queue=queue, duration=2, connections=4, batch=10, partitions=4,
                  producer_procs=1, consumer_procs=0)
    out = run_cell(broker.url, shape, {}, "smoke push")
    stored = asyncio.run(fetch_all(broker.url, queue, shape.partitions))
    gate = check("fetch", out.pushed, stored, out.uncertain)
    assert out.pushed.count() > 0
    assert gate.passed, gate
    assert gate.delivered == out.pushed.count()


@pytest.mark.parametrize("wire", WIRES)  # binary: binary pushes; frames: framed push and pop
def test_push_pop_ack_cell_delivers_every_message_to_every_group(broker: BrokerProcess,
                                                                 wire: str) -> None:
    queue = "smoke-pipe-" + uuid.uuid4().hex[:8]
    shape = Shape(queue=queue, duration=2, connections=4, batch=10, partitions=4,
                  groups=("g1", "g2"), consumers_per_group=2, pop_batch=50, pop_partitions=2,
                  wait_ms=500, producer_procs=1, consumer_procs=1, drain_seconds=30, wire=wire)
    out = run_cell(broker.url, shape, {}, "smoke pipe")
    assert out.pushed.count() > 0
    assert [g.group for g in out.gates] == ["g1", "g2"]
    for gate in out.gates:
        assert gate.passed, gate
        assert gate.delivered == out.pushed.count()


def test_a_warmed_cell_finds_its_partitions_made_and_nothing_left_to_deliver(
        broker: BrokerProcess) -> None:
    queue = "smoke-warm-" + uuid.uuid4().hex[:8]
    shape = Shape(queue=queue, duration=2, connections=4, batch=10, partitions=4,
                  groups=("g1", "g2"), consumers_per_group=2, pop_batch=50, pop_partitions=2,
                  wait_ms=500, producer_procs=1, consumer_procs=1, drain_seconds=30)
    assert asyncio.run(warm(broker.url, shape)) == 8  # 4 partitions, consumed by 2 groups
    marks = asyncio.run(_high_watermarks(broker.url, queue, shape.partitions))
    assert marks == [1, 1, 1, 1]
    out = run_cell(broker.url, shape, {}, "smoke warmed")
    assert out.pushed.count() > 0
    for gate in out.gates:  # the warm-up's messages were consumed before the cell began
        assert gate.passed and gate.unexpected == 0, gate
        assert gate.delivered == out.pushed.count()


async def _high_watermarks(url: str, queue: str, partitions: int) -> list[int]:
    conn = Connection(url)
    try:
        body = msgspec.json.encode({"entries": [
            {"queue": queue, "partition": f"p{p}", "offset": 0} for p in range(partitions)]})
        answer = await conn.request("POST", "/api/v1/fetch", body)
        assert answer.status == 200, answer.body
        return [e["highWatermark"] for e in msgspec.json.decode(answer.body)["entries"]]
    finally:
        await conn.close()
