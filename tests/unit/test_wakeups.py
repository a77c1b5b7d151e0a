"""Who a wake-up wakes: at most n parked pops per waiting line, oldest first."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from core.engine.listener import WakeupHub
from core.engine.wake_link import WakeLink
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
    heard: list[str] = []
    link = WakeLink("postgresql://unused", {}, {}, on_connected=lambda: None)
    link.notifier_pid = 42
    relay = link._relay(heard.append)
    relay(None, 42, "queen_wakeup", "7:2")
    relay(None, 43, "queen_wakeup", "7:3")
    assert heard == ["7:3"]
    h = hub()
    with h.parked([7], "g") as a, h.parked([7], "g") as b:
        h._on_notification("7:2")
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
    heard: list[tuple[int, list[int], bool]] = []
    there.on_marks = lambda q, pids, complete: heard.append((q, list(pids), complete))
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
        there._on_notification(payload)
        assert not g1.event.is_set()  # the span went to a g1 pop elsewhere
        assert g2.event.is_set() and g1_p1.event.is_set()  # other lines: woken as before
        # Its ready sets heard of the partition all the same, so g1's waiter finds data the
        # other pop left at its next look.
        assert heard == [(7, [41], True)]


async def test_served_counts_only_lower_the_count_they_cover() -> None:
    h = hub()
    with h.parked([7], "g") as a, h.parked([7], "g") as b, h.parked([7], "g") as c:
        h._on_notification(f"7:3::{group_token('g')}=1")
        assert [w.event.is_set() for w in (a, b, c)] == [True, True, False]


async def test_woken_waiters_look_after_their_ready_sets_heard_the_partitions() -> None:
    h = hub()
    heard: list[tuple[int, list[int], bool]] = []
    woken_when_heard: list[bool] = []

    def on_marks(q: int, pids: Sequence[int], complete: bool) -> None:
        heard.append((q, list(pids), complete))
        woken_when_heard.append(a.event.is_set())
    h.on_marks = on_marks
    with h.parked([7], "g") as a, h.parked([7], "g") as b:
        h._on_notification("7:1:41")
        assert a.event.is_set() and not b.event.is_set()
        h.announce([(7, 42)])  # a local commit to partition 42
        assert b.event.is_set()
    assert heard == [(7, [41], True), (7, [42], True)]
    assert woken_when_heard == [False, True]  # marks first, then the waiter looks


@pytest.mark.parametrize("payload", ["seven", "7:1::g1=1", "7:1::0000abcd", "7:1::0000abcd=x"])
def test_malformed_payload_is_rejected(payload: str) -> None:
    with pytest.raises(ValueError):
        decode_payload(payload)
