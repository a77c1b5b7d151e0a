"""Long-poll pop: claim now, or park until a mark, a due candidate, a look, or the deadline.

A parked pop also rides through a database outage (it keeps re-checking until its deadline)
and stops waiting at once when its process starts to shut down.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from core.engine.listener import WakeupHub
from core.engine.pop import PopRequest, PopResult
from core.engine.ready.reader import Reader
from core.errors import StorageUnavailable
from core.waiting import first_of

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Look intervals while parked (§4.2). With the ready set a look at nothing costs no
    statement, so a parked pop looks every `max_ms`; the initial interval, doubled after
    `threshold` looks, paces the looks of a pop riding out a database outage."""

    initial_ms: int = 100
    threshold: int = 3
    multiplier: float = 2.0
    max_ms: int = 1000


# How long past its deadline a long poll's claim may run before it is abandoned (it answers
# empty; a claim the server still commits is given back: `GiveBack`).
_STATEMENT_GRACE_S = 3.0
# Releases what an abandoned look claimed after its pop had answered (the broker's).
GiveBack = Callable[[PopResult], Awaitable[None]]


async def pop_or_wait(reader: Reader, hub: WakeupHub, request: PopRequest, *, wait: bool,
                      timeout_ms: int, backoff: Backoff, gone: asyncio.Event | None = None,
                      stop_waiting: asyncio.Event | None = None,
                      paused: Callable[[], bool] = lambda: False,
                      give_back: GiveBack | None = None) -> PopResult:
    """Answer as soon as something is delivered; an empty result at the deadline, when
    `wait` is false, when the client has `gone`, or once `stop_waiting` is set (the process
    is shutting down: a parked pop answers at once rather than when it is cut off).

    While `paused()` (pop maintenance) nothing is claimed: a long poll stays parked as on an
    empty queue, so consume loops idle instead of spinning, and claims as soon as pops
    resume (whoever resumes them wakes every parked pop) or answers empty at its deadline.

    A parked pop looks again when a mark wakes it, when a candidate it was told to wait for
    becomes due, and at least every `backoff.max_ms`; a look at lanes with nothing ready
    costs no statement (core/engine/ready/reader.py), so looking often is free. Only the
    last look, at the deadline, settles an empty answer (the reader's `settle`).

    A look still running well past the deadline is abandoned (the pop answers empty); what
    it claims once it ends is handed to `give_back`, which releases it at once."""
    deadline = time.monotonic() + timeout_ms / 1000
    interval = backoff.initial_ms / 1000
    # Which queues' wake-ups concern us: None (any) until a named queue's id is known, and
    # always for discovery pops, which any push may serve.
    scope: frozenset[int] | None = None
    while True:
        if gone is not None and gone.is_set():
            return PopResult(None)  # never lease messages to a client that has left
        # Park before looking, so a commit between the look and the wait still wakes us.
        with hub.parked(scope, request.group, request.partition) as waiter:
            final = not wait or time.monotonic() >= deadline
            try:
                if paused():
                    result = PopResult(None)
                elif wait:
                    # A frozen primary (a failover under way) holds a statement until the
                    # driver gives up, past our deadline: answer by the deadline regardless.
                    result = await _abandoned_after(
                        reader.pop(request, gone, settle=final),
                        max(deadline - time.monotonic(), 0) + _STATEMENT_GRACE_S, give_back)
                else:
                    result = await reader.pop(request, gone)
                unreachable = False
            except (StorageUnavailable, TimeoutError):
                if not wait:
                    raise
                # A long poll waits out a database outage like an empty queue: it looks
                # again on its backoff (the listener's reconnect wakes it at once) and answers
                # messages when the database is back, or nothing at its deadline. An error
                # here would stop the official client's consume loop.
                result = PopResult(None, unreachable=True)
                unreachable = True
            if result.claims:
                return result
            if not wait or _is_set(stop_waiting):
                return result
            remaining = deadline - time.monotonic()
            if _is_set(gone) or (remaining <= 0 and (final or unreachable or paused())):
                return result
            if remaining <= 0:
                continue  # one more look, which settles the empty answer
            if scope is None and request.queue is not None and result.queue_ids:
                hub.learnt(waiter, result.queue_ids)  # a wake-up of its queue finds it there
            nap = backoff.max_ms / 1000
            if unreachable:
                nap, interval = interval, min(interval * backoff.multiplier,
                                              backoff.max_ms / 1000)
            due = reader.next_due(request)
            if due is not None:
                nap = min(nap, due + 0.005)
            woke = await _wait_any(waiter.event, [gone, stop_waiting], min(nap, remaining))
        if request.queue is not None and result.queue_ids:
            scope = frozenset(result.queue_ids)
        if woke:
            interval = backoff.initial_ms / 1000


async def _abandoned_after(claim: Coroutine[Any, Any, PopResult], seconds: float,
                           give_back: GiveBack | None = None) -> PopResult:
    """`claim`'s result, or TimeoutError after `seconds`, leaving it to finish on its own:
    cancelling it would wait again for the silent server (the rollback and the connection's
    reset). What it claims then was answered to nobody: `give_back` releases it (without it,
    it stays leased until its lease ends, the queue's lease time, 300 s by default)."""
    task = asyncio.ensure_future(claim)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task in done:
        return task.result()
    task.add_done_callback(functools.partial(_settle_abandoned, give_back))
    raise TimeoutError


# Give-backs under way, held so that the event loop does not drop them half done.
_GIVING_BACK: set[asyncio.Future[None]] = set()


def _settle_abandoned(give_back: GiveBack | None, task: asyncio.Future[PopResult]) -> None:
    if task.cancelled() or task.exception() is not None:
        return  # retrieved: an abandoned claim's failure is expected, not news
    result = task.result()
    if give_back is not None and result.claims:
        giving = asyncio.ensure_future(give_back(result))
        _GIVING_BACK.add(giving)
        giving.add_done_callback(_gave_back)


def _gave_back(giving: asyncio.Future[None]) -> None:
    _GIVING_BACK.discard(giving)
    if not giving.cancelled() and (exc := giving.exception()) is not None:
        # The lease ends on its own then, as it did before claims were given back.
        log.info("an abandoned claim was not given back (%r)", exc)


def _is_set(event: asyncio.Event | None) -> bool:
    return event is not None and event.is_set()


async def _wait_any(event: asyncio.Event, others: list[asyncio.Event | None],
                    timeout: float) -> bool:
    """Wait for `event` (or any of `others`) up to `timeout`; answer whether `event` fired."""
    await first_of([event, *(other for other in others if other is not None)], timeout)
    return event.is_set()
