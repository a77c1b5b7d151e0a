"""The pop autopilot's rules (wire-protocol-extensions §20.5): the width controller (Queen's
rule, from what this process knows to be ready), its view from wake-up hints, and the batch
from the lane's drain rate (EWMA of per-ack samples) x 200 ms."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from core.engine import conflation
from core.engine.autopilot import AutopilotState, PilotLane, Widths, start_width
from core.errors import BadRequest

LANE = PilotLane("q", None, None, "g")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class View:
    """A ReadyView told what to say."""

    def __init__(self) -> None:
        self.count = 0
        self.age: float | None = None
        self.claim_age: float | None = None
        self.taken_calls: list[tuple[list[int], list[int]]] = []

    def ready(self, queue: str, group: str) -> tuple[int, float | None]:
        return self.count, self.age

    def taken(self, queue: str, group: str, queue_ids: Sequence[int],
              partition_ids: Sequence[int]) -> float | None:
        self.taken_calls.append((list(queue_ids), list(partition_ids)))
        return self.claim_age if partition_ids else None


def claim(widths: Widths, delivered: int = 100, requested: int = 100) -> None:
    widths.popped("q", "g", queue_ids=[1], partition_ids=[10] if delivered else [],
                  delivered=delivered, requested=requested)


@pytest.mark.parametrize(("ready", "live", "expected"), [
    (0, 1, 1), (1, 1, 1), (10, 1, 10), (10, 3, 3), (5, 2, 3), (7, 7, 1), (7, 8, 1),
    (500, 1, 64), (129, 2, 64), (5, 0, 5)])
def test_start_width_shares_the_known_ready_among_live_pops(
        ready: int, live: int, expected: int) -> None:
    assert start_width(ready, live) == expected


def test_a_lane_this_process_knows_nothing_about_starts_at_one() -> None:
    widths = Widths(View(), Clock())
    assert widths.choose("q", "g", 1) == 1
    assert widths.width("q", "other") is None


def test_a_new_lane_starts_at_its_known_ready_over_live_pops() -> None:
    view = View()
    view.count, view.age = 10, 0.5
    widths = Widths(view, Clock())
    assert widths.choose("q", "g", 3) == 3
    assert widths.choose("q", "h", 1) == 10


def test_the_width_holds_for_500_ms_or_16_pops_then_widens_smoothly_to_the_ready_count(
        ) -> None:
    clock, view = Clock(), View()
    widths = Widths(view, clock)
    assert widths.choose("q", "g", 1) == 1
    claim(widths)
    view.count = 9  # fresh: no age past 25 ms, so the ready count is the only target
    for _ in range(15):
        clock.now += 0.01
        assert widths.choose("q", "g", 1) == 1
        claim(widths)
    clock.now += 0.01
    assert widths.choose("q", "g", 1) == 3  # the 16th pop: 0.75 x 1 + 0.25 x 9 = 3
    claim(widths)
    clock.now += 0.49
    assert widths.choose("q", "g", 1) == 3  # 490 ms and one pop since the change
    claim(widths)
    clock.now += 0.01
    assert widths.choose("q", "g", 1) == 5  # 500 ms: 0.75 x 3 + 0.25 x 9 = 4.5, half up


def test_data_waiting_over_25_ms_doubles_the_width() -> None:
    clock, view = Clock(), View()
    view.count = 4
    widths = Widths(view, clock)
    assert widths.choose("q", "g", 1) == 4
    claim(widths)
    view.count, view.age = 2, 0.026
    clock.now += 0.5
    assert widths.choose("q", "g", 1) == 5  # 0.75 x 4 + 0.25 x 8
    claim(widths)
    clock.now += 0.5
    view.age = 0.025  # not over 25 ms, and 2 ready is not under 5 / 2: no change
    assert widths.choose("q", "g", 1) == 5


def test_the_age_of_what_the_last_claim_took_counts_as_waiting() -> None:
    clock, view = Clock(), View()
    view.count = 4
    widths = Widths(view, clock)
    assert widths.choose("q", "g", 1) == 4
    view.count, view.claim_age = 0, 0.040  # nothing ready now, but the claim took old data
    claim(widths)
    clock.now += 0.5
    assert widths.choose("q", "g", 1) == 5


def test_the_width_halves_only_with_little_ready_no_wait_and_a_poor_fill() -> None:
    clock, view = Clock(), View()
    view.count = 8
    widths = Widths(view, clock)
    assert widths.choose("q", "g", 1) == 8
    claim(widths, delivered=60)  # fill 0.6
    view.count, view.age = 3, 0.001
    clock.now += 0.5
    assert widths.choose("q", "g", 1) == 8  # the fill is not under 0.5
    claim(widths, delivered=40)
    view.age = 0.007
    clock.now += 0.5
    assert widths.choose("q", "g", 1) == 8  # the oldest ready data is not under 6.25 ms
    claim(widths, delivered=40)
    view.count, view.age = 4, None
    clock.now += 0.5
    assert widths.choose("q", "g", 1) == 8  # 4 ready is not under 8 / 2
    claim(widths, delivered=40)
    view.count = 3
    clock.now += 0.5
    assert widths.choose("q", "g", 1) == 7  # 0.75 x 8 + 0.25 x 4
    claim(widths, delivered=0)  # an empty pop: fill 0, and not a claim
    clock.now += 0.5
    assert widths.choose("q", "g", 1) == 6  # 0.75 x 7 + 0.25 x 3.5 = 6.125


def test_a_lane_without_a_claim_for_over_a_second_starts_again() -> None:
    clock, view = Clock(), View()
    widths = Widths(view, clock)
    assert widths.choose("q", "g", 1) == 1
    claim(widths)
    view.count, view.age = 40, 0.2
    clock.now += 1.0
    assert widths.choose("q", "g", 1) == 11  # a change: 0.75 x 1 + 0.25 x 40 = 10.75
    claim(widths, delivered=0)  # empty pops do not keep a lane going
    clock.now += 0.01
    assert widths.choose("q", "g", 2) == 20  # over 1 s since its claim: 40 ready / 2 live
    assert widths.choose("q", "g", 2) == 20  # and again while it has not claimed since


def test_the_width_stays_within_1_and_64() -> None:
    clock, view = Clock(), View()
    view.count, view.age = 64, 0.1
    widths = Widths(view, clock)
    assert widths.choose("q", "g", 1) == 64
    claim(widths)
    view.count = 1000
    for _ in range(20):
        clock.now += 0.5
        assert widths.choose("q", "g", 1) == 64
        claim(widths)
    view.count, view.age = 0, None
    widths = Widths(view, clock)
    assert widths.choose("q", "g", 1) == 1
    for _ in range(20):
        claim(widths, delivered=0)
        claim(widths, delivered=1)
        clock.now += 0.5
        assert widths.choose("q", "g", 1) == 1


def test_popped_tells_the_view_what_the_pop_addressed_and_claimed() -> None:
    view = View()
    widths = Widths(view, Clock())
    widths.popped("q", "g", queue_ids=[1], partition_ids=[], delivered=0, requested=100)
    widths.choose("q", "g", 1)
    widths.popped("q", "g", queue_ids=[1], partition_ids=[10, 11], delivered=5,
                  requested=100)
    assert view.taken_calls == [([1], []), ([1], [10, 11])]



def test_batch_follows_the_ewma_of_ack_samples() -> None:
    clock = Clock()
    pilot = AutopilotState(clock)
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
    assert pilot.batch(PilotLane("q", None, None, "other")) == 100
    pilot.acked([(None, True), ("unknown", True)])
    assert pilot.rate(LANE) == pytest.approx(1625.0)


def test_in_flight_counts_per_lane() -> None:
    pilot = AutopilotState()
    other = PilotLane(None, "ns", None, "g")
    with pilot.flight(LANE) as a, pilot.flight(LANE) as b, pilot.flight(other) as c:
        assert (a, b, c) == (1, 2, 1)
    with pilot.flight(LANE) as d:
        assert d == 1


def test_lease_memory_is_bounded() -> None:
    pilot = AutopilotState(Clock())
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
        conflation.check_conflation(declared=True, group=group, auto_ack=auto_ack)
    conflation.check_conflation(declared=False, group=group, auto_ack=auto_ack)


@pytest.mark.parametrize(("partitions", "batch", "expected"), [
    (None, 1, 1), (None, 10, 10), (None, 1000, 64), (3, 1000, 3), (1000, 1, 64)])
def test_conflation_width(partitions: int | None, batch: int, expected: int) -> None:
    assert conflation.conflation_width(partitions, batch) == expected
