"""Who a wake-up wakes: at most n parked pops per waiting line, oldest first."""

from __future__ import annotations

import pytest

from core.engine.listener import WakeupHub
from core.engine.wakeup import decode_payload, encode_payload, group_token


def hub() -> WakeupHub:
    return WakeupHub("postgresql://unused", {})


async def test_one_push_wakes_one_pop_per_group_oldest_first() -> None:
    h = hub()
    with h.parked([7], "g1") as a, h.parked([7], "g1") as b, h.parked([7], "g2") as c:
        h.wake(7)
        assert (a.event.is_set(), b.event.is_set(), c.event.is_set()) == (True, False, True)
        h.wake(7)  # a second span: the next waiter of g1, and g2's only waiter is already up
        assert b.event.is_set()


async def test_a_count_wakes_that_many_per_group() -> None:
    h = hub()
    with h.parked([7], "g") as a, h.parked([7], "g") as b, h.parked([7], "g") as c:
        h.wake(7, 2)
        assert [w.event.is_set() for w in (a, b, c)] == [True, True, False]


async def test_other_queues_are_not_woken_but_discovery_pops_are() -> None:
    h = hub()
    with h.parked([8], "g") as other, h.parked(None, "g") as discovery:
        h.wake(7)
        assert not other.event.is_set()
        assert discovery.event.is_set()


async def test_pops_of_one_partition_wait_in_their_own_line() -> None:
    h = hub()
    with h.parked([7], "g", "p1") as p1, h.parked([7], "g") as any_partition:
        h.wake(7)
        assert p1.event.is_set() and any_partition.event.is_set()


async def test_leaving_the_block_unregisters_the_waiter() -> None:
    h = hub()
    with h.parked([7], "g"):
        assert h.parked_count == 1
    assert h.parked_count == 0
    h.wake(7)  # nobody left: nothing to do, nothing raised


async def test_own_notifications_are_ignored_and_others_wake_by_count() -> None:
    h = hub()
    h._notifier_pid = 42
    with h.parked([7], "g") as a, h.parked([7], "g") as b:
        h._on_notification(None, 42, "queen_wakeup", "7:2")
        assert not a.event.is_set()
        h._on_notification(None, 43, "queen_wakeup", "7:2")
        assert a.event.is_set() and b.event.is_set()


@pytest.mark.parametrize("queue_id,count,partitions,served,text", [
    (7, 1, [], {}, "7"), (7, 3, [], {}, "7:3"), (7, 2, [41, 42], {}, "7:2:41,42"),
    (7, 2, [41], {"0000abcd": 1}, "7:2:41:0000abcd=1"),
    (7, 3, [], {"0000abcd": 1, "ffffffff": 2}, "7:3::0000abcd=1,ffffffff=2")])
def test_payload_round_trip(queue_id: int, count: int, partitions: list[int],
                            served: dict[str, int], text: str) -> None:
    assert encode_payload(queue_id, count, partitions, served) == text
    assert decode_payload(text) == (queue_id, count, partitions, served)


async def test_a_local_commit_tells_the_others_what_its_own_pops_took() -> None:
    """One push, a waiter of g1 here: the notification says g1 took its span, so the other
    processes' g1 waiters stay parked (they would race for it and find nothing); g2, which
    nobody here waits for, is woken everywhere."""
    here, there = hub(), hub()
    with here.parked([7], "g1") as mine:
        here.announce([(7, 41)])
        assert mine.event.is_set()
    ((queue, (count, hints, served)),) = {
        q: (len(names) + here._unnamed[q], list(names), dict(here._served[q]))
        for q, names in here._hints.items()
    }.items()
    payload = encode_payload(queue, count, hints, served)
    assert payload == f"7:1:41:{group_token('g1')}=1"
    with there.parked([7], "g1") as g1, there.parked([7], "g2") as g2, \
            there.parked([7], "g1", "p1") as g1_p1:
        there._on_notification(None, 43, "queen_wakeup", payload)
        assert not g1.event.is_set()  # the span went to a g1 pop elsewhere
        assert g2.event.is_set() and g1_p1.event.is_set()  # other lines: woken as before
        # The queue's change mark moved all the same, so g1's waiter re-checks at its next
        # backoff instead of skipping it as quiet (data the other pop left is found).
        assert there._changes[7] == 1


async def test_served_counts_only_lower_the_count_they_cover() -> None:
    h = hub()
    with h.parked([7], "g") as a, h.parked([7], "g") as b, h.parked([7], "g") as c:
        h._on_notification(None, 43, "queen_wakeup", f"7:3::{group_token('g')}=1")
        assert [w.event.is_set() for w in (a, b, c)] == [True, True, False]


async def test_woken_waiters_are_handed_the_partitions_that_became_deliverable() -> None:
    h = hub()
    with h.parked([7], "g") as a, h.parked([7], "g") as b:
        h._on_notification(None, 43, "queen_wakeup", "7:1:41")
        assert a.event.is_set() and a.hints == [41]
        assert not b.event.is_set() and b.hints == []
        h.announce([(7, 42)])  # a local commit to partition 42
        # The longest-waiting first (41 was announced before 42 and nobody here claimed it).
        assert b.event.is_set() and b.hints == [41, 42]


@pytest.mark.parametrize("payload", ["seven", "7:1::g1=1", "7:1::0000abcd", "7:1::0000abcd=x"])
def test_malformed_payload_is_rejected(payload: str) -> None:
    with pytest.raises(ValueError):
        decode_payload(payload)


async def test_hints_are_served_oldest_first_dropped_once_claimed_and_expire(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import core.engine.listener

    clock = [100.0]
    monkeypatch.setattr(core.engine.listener.time, "monotonic", lambda: clock[0])
    h = hub()
    h.announce([(7, 1), (7, 2), (7, 3), (7, 2)])  # 2 again: it keeps its place
    with h.parked([7], "g") as a:
        h.announce([(7, 4)])
        assert a.hints == [1, 2, 3, 4]
    h.claimed(7, [1, 3])  # this process's pop took them: their data is served
    with h.parked([7], "g") as b:
        h.announce([(7, 5)])
        assert b.hints == [2, 4, 5]
    clock[0] += 2.0  # nobody here claimed 2, 4, 5 in time: left to the scan
    with h.parked([7], "g") as c:
        h.announce([(7, 6)])
        assert c.hints == [6]
