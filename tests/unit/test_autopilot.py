"""The pop autopilot's rules (wire-protocol-extensions §20.5): width from ready partitions and
pops in flight, batch from the lane's drain rate (EWMA of per-ack samples) x 200 ms."""

from __future__ import annotations

import pytest

from core.engine import conflation
from core.engine.autopilot import Autopilot, Lane, batch_for, width
from core.errors import BadRequest

LANE = Lane("q", None, None, "g")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("ready", "in_flight", "expected"), [
    (0, 1, 1), (1, 1, 1), (10, 1, 10), (10, 3, 4), (7, 7, 1), (7, 8, 1), (500, 1, 64),
    (129, 2, 64), (5, 0, 5)])
def test_width(ready: int, in_flight: int, expected: int) -> None:
    assert width(ready, in_flight) == expected


@pytest.mark.parametrize(("rate", "expected"), [
    (None, 100), (0.0, 100), (499.0, 100), (600.0, 120), (2500.0, 500), (5000.0, 1000),
    (1e9, 1000)])
def test_batch_for_rate(rate: float | None, expected: int) -> None:
    assert batch_for(rate) == expected


def test_batch_follows_the_ewma_of_ack_samples() -> None:
    clock = Clock()
    pilot = Autopilot(clock)
    assert pilot.batch(LANE) == 100  # before any sample
    pilot.delivered(LANE, "L1")
    clock.now += 0.5
    pilot.acked([("L1", False)] * 1000)  # 1000 in 0.5 s: 2000/s
    assert pilot.rate(LANE) == pytest.approx(2000.0)
    assert pilot.batch(LANE) == 400
    clock.now += 0.5
    pilot.acked([("L1", True)] * 500)  # 500 in 1 s since delivery: sample 500/s
    assert pilot.rate(LANE) == pytest.approx(0.25 * 500 + 0.75 * 2000)
    # Released: a later ack of that lease gives no sample; other lanes are untouched.
    pilot.acked([("L1", True)])
    assert pilot.rate(LANE) == pytest.approx(1625.0)
    assert pilot.batch(Lane("q", None, None, "other")) == 100
    pilot.acked([(None, True), ("unknown", True)])
    assert pilot.rate(LANE) == pytest.approx(1625.0)


def test_in_flight_counts_per_lane() -> None:
    pilot = Autopilot()
    other = Lane(None, "ns", None, "g")
    with pilot.flight(LANE) as a, pilot.flight(LANE) as b, pilot.flight(other) as c:
        assert (a, b, c) == (1, 2, 1)
    with pilot.flight(LANE) as d:
        assert d == 1


def test_lease_memory_is_bounded() -> None:
    pilot = Autopilot(Clock())
    for i in range(20_000):
        pilot.delivered(LANE, f"L{i}")
    pilot.acked([("L0", True)])  # forgotten: no sample
    assert pilot.rate(LANE) is None
    pilot.acked([("L19999", True)])
    assert pilot.rate(LANE) is not None


@pytest.mark.parametrize(("group", "auto_ack"), [
    ("", False), ("__QUEUE_MODE__", False), ("g", True)])
def test_conflation_refusals(group: str, auto_ack: bool) -> None:
    with pytest.raises(BadRequest):
        conflation.check_request(declared=True, group=group, auto_ack=auto_ack)
    conflation.check_request(declared=False, group=group, auto_ack=auto_ack)


@pytest.mark.parametrize(("partitions", "batch", "expected"), [
    (None, 1, 1), (None, 10, 10), (None, 1000, 64), (3, 1000, 3), (1000, 1, 64)])
def test_conflation_width(partitions: int | None, batch: int, expected: int) -> None:
    assert conflation.width(partitions, batch) == expected
