"""Long-poll pop: claim now, or park until a wake-up, a backoff re-check, or the deadline."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from core.db import Database
from core.listener import WakeupHub
from core.pop import PopRequest, PopResult, pop


@dataclass(frozen=True, slots=True)
class Backoff:
    """Re-check intervals while parked (§4.2): initial, doubled after `threshold` empty
    checks, capped; a wake-up resets it."""

    initial_ms: int = 100
    threshold: int = 3
    multiplier: float = 2.0
    max_ms: int = 1000


async def pop_or_wait(db: Database, hub: WakeupHub, request: PopRequest, *, wait: bool,
                      timeout_ms: int, backoff: Backoff,
                      gone: asyncio.Event | None = None) -> PopResult:
    """Answer as soon as something is delivered; an empty result at the deadline, when
    `wait` is false, or when the client has `gone`."""
    deadline = time.monotonic() + timeout_ms / 1000
    interval = backoff.initial_ms / 1000
    empty_checks = 0
    # Which queues' wake-ups concern us: None (any) until a named queue's id is known, and
    # always for discovery pops, which any push may serve.
    scope: frozenset[int] | None = None
    hints: list[int] = []  # partitions the last wake-up named
    while True:
        if gone is not None and gone.is_set():
            return PopResult(None)  # never lease messages to a client that has left
        # Park before checking, so a commit between the check and the wait still wakes us.
        with hub.parked(scope, request.group, request.partition) as waiter:
            result = await pop(db, request, hints)
            if result.messages or not wait:
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (gone is not None and gone.is_set()):
                return result
            woke = await _wait_any(waiter.event, gone, min(interval, remaining))
            hints = waiter.hints if woke else []
        if request.queue is not None and result.queue_ids:
            scope = frozenset(result.queue_ids)
        if woke:
            interval = backoff.initial_ms / 1000
            empty_checks = 0
        else:
            empty_checks += 1
            if empty_checks >= backoff.threshold:
                interval = min(interval * backoff.multiplier, backoff.max_ms / 1000)


async def _wait_any(event: asyncio.Event, gone: asyncio.Event | None, timeout: float) -> bool:
    """Wait for `event` (or `gone`) up to `timeout`; answer whether `event` fired."""
    waits = [asyncio.ensure_future(event.wait())]
    if gone is not None:
        waits.append(asyncio.ensure_future(gone.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return event.is_set()
