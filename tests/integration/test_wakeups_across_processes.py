"""Wake-ups between two processes over a real LISTEN/NOTIFY: a span that a waiting pop of
a group was woken for in one process wakes no second pop of that group in another (it could
only run an empty claim), while every other group is still woken there."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest

from core.listener import Waiter, WakeupHub

QUEUE = random.randrange(10**9, 2 * 10**9)  # an id no real queue of the test database has


@pytest.fixture
async def hubs(database_url: str) -> AsyncIterator[tuple[WakeupHub, WakeupHub]]:
    pair = (WakeupHub(database_url, {}), WakeupHub(database_url, {}))
    tasks = [asyncio.create_task(loop()) for h in pair
             for loop in (h.listen_forever, h.announce_forever)]
    try:
        async with asyncio.timeout(10):
            while not all(h.listening for h in pair):
                await asyncio.sleep(0.01)
        yield pair
    finally:
        for h in pair:
            h.close()
        await asyncio.wait(tasks, timeout=5)
        for t in tasks:
            t.cancel()


async def woken(waiter: Waiter) -> None:
    async with asyncio.timeout(5):
        await waiter.event.wait()


async def test_a_group_served_in_one_process_is_not_woken_again_in_the_other(
        hubs: tuple[WakeupHub, WakeupHub]) -> None:
    here, there = hubs
    with here.parked([QUEUE], "g1") as mine, there.parked([QUEUE], "g1") as other, \
            there.parked([QUEUE], "g2") as g2:
        mine.waiting = True
        here.announce([(QUEUE, 41)])
        assert mine.event.is_set()
        await woken(g2)  # the notification arrived: g2 has no pop here, so it is woken there
        assert g2.hints == [41]
        assert not other.event.is_set()  # one notification woke g2 and passed over g1


async def test_a_group_with_nobody_waiting_here_is_woken_in_the_other_process(
        hubs: tuple[WakeupHub, WakeupHub]) -> None:
    here, there = hubs
    with here.parked([QUEUE], "g1") as claiming, there.parked([QUEUE], "g1") as other:
        # The pop here is in the middle of its claim, which may not see the new span.
        here.announce([(QUEUE, 42)])
        assert claiming.event.is_set()
        await woken(other)
        assert other.hints == [42]
