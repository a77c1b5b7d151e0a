"""Parked ephemeral pops of one process, by queue and consumer group, and what wakes them.

A push or a redelivery anywhere sends NOTIFY on `CHANNEL` with the queue's name at its
commit (schema/functions/80_ephemeral.sql); the process's wake-up hub
(core/engine/listener.py) LISTENs on it and hands the payload here. A commit made by this process also wakes its own waiters at
once, before the notification comes back.

A wake-up wakes one waiter per consumer group (every group receives every message; the pops
of one group compete, so waking all of them for one push would make all but one take the
queue's lock for nothing). A woken pop that filled its batch passes the wake-up on to the
next waiter of its group (`pass_on`): more may be waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from core.parked import leave

CHANNEL = "queen_ephemeral"


class Waiters:
    def __init__(self) -> None:
        # queue -> group -> parked pops in arrival order
        self._lines: dict[str, dict[str, dict[asyncio.Event, None]]] = {}

    @contextlib.contextmanager
    def parked(self, queue: str, group: str) -> Iterator[asyncio.Event]:
        """Register before checking, so a commit between the check and the wait counts."""
        event = asyncio.Event()
        self._lines.setdefault(queue, {}).setdefault(group, {})[event] = None
        try:
            yield event
        finally:
            leave(self._lines, queue, group, event)

    def wake(self, queue: str) -> None:
        """One not-yet-woken waiter per group of the queue."""
        for line in self._lines.get(queue, {}).values():
            for event in line:
                if not event.is_set():
                    event.set()
                    break

    def pass_on(self, queue: str, group: str) -> None:
        line = self._lines.get(queue, {}).get(group, {})
        for event in line:
            if not event.is_set():
                event.set()
                return

    def notified(self, payload: str | None) -> None:
        """The hub's callback: a queue name, or None after (re)connecting (anything may have
        been missed: everyone checks)."""
        if payload is not None:
            self.wake(payload)
            return
        for groups in self._lines.values():
            for line in groups.values():
                for event in line:
                    event.set()

    @property
    def parked_count(self) -> int:
        return sum(len(line) for groups in self._lines.values() for line in groups.values())


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
