"""Waiting with a time limit without losing a cancel.

`asyncio.wait_for` on Python 3.11 returns its inner result and drops a cancel that arrives
in the same turn as that result (gh-86296, fixed in 3.12). A side task whose loop drops the
cancel meant to end it outlives its TaskGroup's stop, so the process never exits; a CI run
of the fault harness hung on exactly that. `asyncio.timeout` counts cancels and keeps them,
so every timed wait in core goes through here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until `event` is set or `seconds` have passed; answer whether it is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()


async def within(seconds: float, awaitable: Awaitable[T]) -> T:
    """Await `awaitable` for at most `seconds` (TimeoutError after)."""
    async with asyncio.timeout(seconds):
        return await awaitable


async def first_of(events: list[asyncio.Event], seconds: float) -> None:
    """Wait until any of `events` is set, or `seconds` have passed."""
    if seconds <= 0:
        return
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
