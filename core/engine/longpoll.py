"""Long-poll pop: claim now, or park until a wake-up, a backoff re-check, or the deadline.

A parked pop also rides through a database outage (it keeps re-checking until its deadline)
and stops waiting at once when its process starts to shut down.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from core.engine.listener import WakeupHub
from core.engine.pop import PopRequest, PopResult
from core.engine.reads.claims import PopLines
from core.engine.reads.quiet import EmptyCheck, EmptyLines, TimedQueues
from core.errors import StorageUnavailable
from core.ids import QueueId


@dataclass(frozen=True, slots=True)
class Backoff:
    """Re-check intervals while parked (§4.2): initial, doubled after `threshold` empty
    checks, capped; a wake-up resets it."""

    initial_ms: int = 100
    threshold: int = 3
    multiplier: float = 2.0
    max_ms: int = 1000
    # A parked pop re-checks at least this often even when nothing was announced (see
    # core/engine/reads/quiet.py); 0 = every backoff interval, as before quiet re-checks.
    quiet_max_ms: int = 10_000


# How long past its deadline a long poll's claim may run before it is abandoned (it answers
# empty; a claim the server still commits is redelivered when its lease expires).
_STATEMENT_GRACE_S = 3.0


async def pop_or_wait(lines: PopLines, hub: WakeupHub, request: PopRequest, *, wait: bool,
                      timeout_ms: int, backoff: Backoff, timed: TimedQueues | None = None,
                      gone: asyncio.Event | None = None,
                      stop_waiting: asyncio.Event | None = None,
                      paused: Callable[[], bool] = lambda: False,
                      empty: EmptyLines | None = None) -> PopResult:
    """Answer as soon as something is delivered; an empty result at the deadline, when
    `wait` is false, when the client has `gone`, or once `stop_waiting` is set (the process
    is shutting down: a parked pop answers at once rather than when it is cut off).

    While `paused()` (pop maintenance) nothing is claimed: a long poll stays parked as on an
    empty queue, so consume loops idle instead of spinning, and claims as soon as pops
    resume (whoever resumes them wakes every parked pop) or answers empty at its deadline.

    A backoff re-check with nothing announced for the pop's queues since its last check is
    skipped (core/engine/reads/quiet.py) when `timed` says the clock cannot change them either.
    So is a long poll's first check when `empty` holds a check of its line on this process
    that found nothing and nothing was announced since: it starts parked, as if woken by
    nothing after that check."""
    deadline = time.monotonic() + timeout_ms / 1000
    interval = backoff.initial_ms / 1000
    empty_checks = 0
    # Which queues' wake-ups concern us: None (any) until a named queue's id is known, and
    # always for discovery pops, which any push may serve.
    scope: frozenset[int] | None = None
    hints: list[int] = []  # partitions the last wake-up named
    woke = True
    # The last fruitless check: the hub's change mark taken just before it (over the scope
    # it had then), and when it ran.
    looked: tuple[frozenset[int] | None, tuple[int, ...] | None, float] | None = None
    result = PopResult(None)
    prior = empty.last(request) if wait and empty is not None else None
    if prior is not None:
        scope, woke = prior.queue_ids, False
        looked = (scope, prior.mark, prior.at)
        result = PopResult(None, queue_ids=[QueueId(q) for q in sorted(scope)])
    while True:
        if gone is not None and gone.is_set():
            return PopResult(None)  # never lease messages to a client that has left
        # Park before checking, so a commit between the check and the wait still wakes us.
        with hub.parked(scope, request.group, request.partition) as waiter:
            mark = hub.change_mark(scope)
            try:
                if paused():
                    result = PopResult(None)
                    looked = None
                elif (not woke and looked is not None
                      and await _quiet(hub, timed, looked, result.queue_ids, backoff)):
                    pass  # nothing changed since the last check: it would find nothing
                elif wait:
                    looked = (scope, mark, time.monotonic())
                    # A frozen primary (a failover under way) holds a statement until the
                    # driver gives up, past our deadline: answer by the deadline regardless.
                    result = await _abandoned_after(
                        lines.claim(request, hints, gone),
                        max(deadline - time.monotonic(), 0) + _STATEMENT_GRACE_S)
                    if empty is not None:
                        _remember(empty, request, looked, result)
                else:
                    result = await lines.claim(request, hints, gone)
            except (StorageUnavailable, TimeoutError):
                looked = None
                if not wait:
                    raise
                # A long poll waits out a database outage like an empty queue: it re-checks
                # on its backoff (the listener's reconnect wakes it at once) and answers
                # messages when the database is back, or nothing at its deadline. An error
                # here would stop the official client's consume loop.
                result = PopResult(None, unreachable=True)
            if result.claims:
                for claim in result.claims:
                    hub.claimed(claim.queue_id, [claim.partition_id])
                return result
            if not wait or _is_set(stop_waiting):
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0 or _is_set(gone):
                return result
            if scope is None and request.queue is not None and result.queue_ids:
                hub.learnt(waiter, result.queue_ids)  # a wake-up of its queue finds it there
            woke = await _wait_any(waiter.event, [gone, stop_waiting], min(interval, remaining))
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


def _remember(empty: EmptyLines, request: PopRequest,
              looked: tuple[frozenset[int] | None, tuple[int, ...] | None, float],
              result: PopResult) -> None:
    """Note what a check found, for the next long poll of its line (see `EmptyLines`)."""
    scope, mark, at = looked
    if result.claims:
        empty.found_something(request)
    elif scope is not None and mark is not None and set(result.queue_ids) == scope:
        empty.found_nothing(request, EmptyCheck(scope, mark, at))


async def _quiet(hub: WakeupHub, timed: TimedQueues | None,
                 looked: tuple[frozenset[int] | None, tuple[int, ...] | None, float],
                 queue_ids: list[QueueId], backoff: Backoff) -> bool:
    """Whether a re-check may be skipped: nothing announced for the queues since the last
    check (`looked`), that check recent enough, and no queue the clock can change."""
    scope, mark, at = looked
    if timed is None or mark is None or hub.change_mark(scope) != mark:
        return False
    if time.monotonic() - at >= backoff.quiet_max_ms / 1000:
        return False
    return not await timed.any_timed(queue_ids)


async def _abandoned_after(claim: Coroutine[Any, Any, PopResult], seconds: float) -> PopResult:
    """`claim`'s result, or TimeoutError after `seconds`, leaving it to finish on its own:
    cancelling it would wait again for the silent server (the rollback and the connection's
    reset). What it claims then is leased to nobody and delivered again when the lease ends."""
    task = asyncio.ensure_future(claim)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task in done:
        return task.result()
    task.add_done_callback(_drop_outcome)
    raise TimeoutError


def _drop_outcome(task: asyncio.Future[PopResult]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: an abandoned claim's failure is expected, not news


def _is_set(event: asyncio.Event | None) -> bool:
    return event is not None and event.is_set()


async def _wait_any(event: asyncio.Event, others: list[asyncio.Event | None],
                    timeout: float) -> bool:
    """Wait for `event` (or any of `others`) up to `timeout`; answer whether `event` fired."""
    waits = [asyncio.ensure_future(event.wait())]
    waits += [asyncio.ensure_future(other.wait()) for other in others if other is not None]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return event.is_set()
