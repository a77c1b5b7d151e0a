"""Parked ephemeral pops of one process, by queue, and what wakes them.

A push or a redelivery anywhere sends NOTIFY on `CHANNEL` with the queue's name at its
commit (schema/090_ephemeral.sql); the process's wake-up hub (core/listener.py) LISTENs on
it and hands the payload here. A commit made by this process also wakes its own waiters at
once, before the notification comes back. Every waiter of the queue checks again (their pops
compete in the database, which hands each message to one of them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

CHANNEL = "queen_ephemeral"


class Waiters:
    def __init__(self) -> None:
        self._by_queue: dict[str, set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def parked(self, queue: str) -> Iterator[asyncio.Event]:
        """Register before checking, so a commit between the check and the wait counts."""
        event = asyncio.Event()
        self._by_queue.setdefault(queue, set()).add(event)
        try:
            yield event
        finally:
            events = self._by_queue.get(queue)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._by_queue[queue]

    def wake(self, queue: str) -> None:
        for event in self._by_queue.get(queue, ()):
            event.set()

    def notified(self, payload: str | None) -> None:
        """The hub's callback: a queue name, or None after (re)connecting (anything may have
        been missed: everyone checks)."""
        if payload is None:
            for events in self._by_queue.values():
                for event in events:
                    event.set()
        else:
            self.wake(payload)

    @property
    def parked_count(self) -> int:
        return sum(len(events) for events in self._by_queue.values())


async def first_of(*events: asyncio.Event, timeout: float) -> None:
    """Until any of `events` is set or `timeout` seconds passed (asyncio.wait cancels
    nothing and drops no cancel of ours)."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=max(0.0, timeout),
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
