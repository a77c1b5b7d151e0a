"""The ready set's lane (core/engine/ready/lane.py): how marks, takes and verdicts file a
partition; and a notification that cannot name every partition (core/engine/listener.py)."""

from __future__ import annotations

from core.engine.listener import WakeupHub
from core.engine.ready.lane import BUSY_RETRY_S, Lane
from core.engine.wakeup import MAX_HINTS, decode_payload, encode_payload


def test_takes_oldest_first_and_a_taken_partition_is_out_until_checked_in() -> None:
    lane = Lane(1, "g")
    for pid, at in ((5, 1.0), (3, 2.0), (9, 3.0)):
        lane.mark(pid, at)
    lane.mark(5, 4.0)  # a partition already ready keeps its place
    assert lane.take(2, 10.0) == [5, 3]
    assert lane.out_ids == {5: False, 3: False} and lane.ready_ids == [9]
    assert lane.take(5, 10.0) == [9]
    assert lane.take(5, 10.0) == []


def test_a_mark_while_out_survives_an_empty_verdict() -> None:
    lane = Lane(1, "g")
    lane.mark(7, 0.0)
    [pid] = lane.take(1, 1.0)
    lane.mark(7, 1.5)  # a commit after the claim statement read the partition
    lane.check_in(pid, "empty", None, 2.0, satisfied=False)
    assert lane.ready_ids == [7]
    [pid] = lane.take(1, 3.0)
    lane.check_in(pid, "empty", None, 4.0, satisfied=False)
    assert not lane.ready_ids and not lane.in_flight and lane.next_due() is None


def test_leased_and_later_candidates_are_deferred_to_their_time() -> None:
    lane = Lane(1, "g")
    for pid in (1, 2, 3):
        lane.mark(pid, 0.0)
    taken = lane.take(3, 0.0)
    lane.check_in(taken[0], "leased", 30.0, 1.0, satisfied=False)
    lane.check_in(taken[1], "later", 10.0, 1.0, satisfied=False)
    lane.check_in(taken[2], "busy", None, 1.0, satisfied=False)
    assert lane.next_due() == 1.0 + BUSY_RETRY_S
    assert lane.take(3, 2.0) == [3]  # busy: looked at again shortly
    lane.check_in(3, "empty", None, 2.0, satisfied=False)
    assert lane.take(3, 9.9) == []
    assert lane.take(3, 10.0) == [2]
    assert lane.known_ready(29.0) == (0, None)
    assert lane.take(3, 30.0) == [1]


def test_a_mark_brings_a_deferred_partition_back_at_once() -> None:
    lane = Lane(1, "g")
    lane.mark(4, 0.0)
    lane.take(1, 0.0)
    lane.check_in(4, "leased", 60.0, 0.0, satisfied=False)
    lane.mark(4, 5.0)  # its lease was released (an ack, the reaper)
    assert lane.take(1, 5.0) == [4]


def test_a_busy_candidate_a_satisfied_pop_did_not_reach_stays_ready() -> None:
    lane = Lane(1, "g")
    lane.mark(1, 0.0)
    lane.mark(2, 0.0)
    first, second = lane.take(2, 0.0)
    lane.check_in(first, "took", 60.0, 1.0, satisfied=True)
    lane.check_in(second, "busy", None, 1.0, satisfied=True)
    assert lane.ready_ids == [2] and lane.next_due() == 60.0


def test_a_notification_that_cannot_name_every_partition_says_so() -> None:
    here = WakeupHub("postgresql://unused", {})
    here.announce([(7, pid) for pid in range(MAX_HINTS + 5)] + [(7, None)])
    names = here._hints[7]
    count = len(names) + here._unnamed[7]
    assert (len(names), count) == (MAX_HINTS, MAX_HINTS + 6)
    payload = encode_payload(7, count, list(names))
    assert len(payload.encode()) < 8000  # PostgreSQL's payload limit
    there = WakeupHub("postgresql://unused", {})
    heard: list[tuple[int, int, bool]] = []
    there.on_marks = lambda q, pids, complete: heard.append((q, len(pids), complete))
    there._on_notification(payload)
    assert heard == [(7, MAX_HINTS, False)]  # its lanes of queue 7 reseed before trust
    queue, n, pids, _ = decode_payload(encode_payload(7, 2, [3, 4]))
    there._on_notification(encode_payload(7, 2, [3, 4]))
    assert heard[-1] == (7, 2, True) and (queue, n, pids) == (7, 2, [3, 4])


def test_a_claim_heard_of_holds_a_partition_back_as_hearsay_until_its_lease_ends() -> None:
    lane = Lane(1, "g")
    lane.mark(4, 0.0)
    lane.taken_elsewhere(4, 30.0)  # another process's pop leased it until 30
    assert lane.take(5, 1.0) == []  # not tried by a pop that has other work
    assert lane.take_hearsay(5, 1.0) == [4]  # but checked before a pop answers nothing
    lane.check_in(4, "leased", 30.0, 1.0, satisfied=False)  # now known from the tables
    assert lane.take_hearsay(5, 2.0) == []
    assert lane.take(5, 29.0) == [] and lane.take(5, 30.0) == [4]


def test_a_release_heard_after_the_claim_brings_the_partition_back() -> None:
    lane = Lane(1, "g")
    lane.taken_elsewhere(8, 60.0)
    lane.mark(8, 2.0)  # an ack elsewhere released it
    assert lane.take(5, 2.0) == [8]
    assert lane.take_hearsay(5, 2.0) == []


def test_a_claim_heard_of_leaves_a_partition_out_with_a_pop_here_alone() -> None:
    lane = Lane(1, "g")
    lane.mark(3, 0.0)
    assert lane.take(1, 0.0) == [3]
    lane.taken_elsewhere(3, 60.0)  # this process's own pop decides by its verdict
    lane.check_in(3, "empty", None, 1.0, satisfied=False)
    assert lane.take_hearsay(5, 1.0) == [] and lane.next_due() is None


def _held_lane() -> Lane:
    """Partition 5 held by minPopWaitTime from a claim of 3 messages: 2 wait, until 60."""
    lane = Lane(1, "g")
    lane.reseeded([(5, "p5", None)], started=0.0, session=1, began_after=0,
                  stopped_after=None, now=0.0)
    assert lane.take(1, 0.0, 3) == [5]
    lane.check_in(5, "later", 60.0, 1.0, satisfied=False, batch=3, waiting=2)
    return lane


def test_a_held_partition_is_a_candidate_of_the_batches_it_fills_alone() -> None:
    lane = _held_lane()
    assert lane.take(5, 2.0, 3) == [] and lane.next_due() == 60.0
    lane.reseeded([(5, "p5", None)], started=3.0, session=1, began_after=0,
                  stopped_after=None, now=3.0)  # the scan cannot tell: still held
    assert lane.take(5, 3.0, 3) == [] and lane.take_one(5, 3.0, 3) is False
    assert lane.take(5, 4.0, 2) == [5]  # a claim of 2 would take both
    lane.give_back([5], 5.0)  # not asked: held as before
    assert lane.take(5, 5.0, 3) == [] and lane.take_one(5, 5.0, 1) is True
    lane.check_in(5, "later", 60.0, 6.0, satisfied=False, batch=1, waiting=2)
    assert lane.take(5, 6.0, 3) == []  # enough for one: a concurrent claim had it
    assert lane.take(5, 6.0 + BUSY_RETRY_S, 3) == [5]
    lane.check_in(5, "later", 60.0, 7.0, satisfied=False, batch=3, waiting=2)
    assert lane.take(5, 59.9, 3) == [] and lane.take(5, 60.0, 3) == [5]  # waited enough


def test_a_mark_or_anything_that_may_hide_one_lifts_a_hold() -> None:
    lane = _held_lane()
    lane.mark(5, 2.0)  # a push: it may have enough now
    assert lane.take(5, 2.0, 3) == [5]
    lane.check_in(5, "later", 60.0, 3.0, satisfied=False, batch=3, waiting=2)
    lane.went_stale()  # a notification that could not name it
    assert lane.take(5, 4.0, 3) == []  # left for the reseed, which finds it
    lane.reseeded([(5, "p5", None)], started=5.0, session=1, began_after=0,
                  stopped_after=None, now=5.0)
    assert lane.take(5, 5.0, 3) == [5]
    lane.went_stale()  # while its claim is out: its verdict is not taken
    lane.check_in(5, "later", 60.0, 6.0, satisfied=False, batch=3, waiting=2)
    assert lane.ready_ids == [5]
    assert lane.take(5, 6.0, 3) == [5]
    lane.check_in(5, "later", 60.0, 7.0, satisfied=False, batch=3, waiting=2)
    lane.reseeded([(5, "p5", None)], started=8.0, session=2, began_after=0,
                  stopped_after=None, now=8.0)  # a new LISTEN session: marks were lost
    assert lane.take(5, 8.0, 3) == [5]
