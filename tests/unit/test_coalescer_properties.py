"""The coalescer under random interleavings (hypothesis).

A scenario is a list of steps run on a private event loop: submits (of 1-4 items to one of
four keys), completions of flush calls in flight (all keys written, the whole call failing,
or some keys failing), cancellations of callers, and ticks (a few turns of the loop). Flush
calls wait until a step completes them, so several can finish in the same loop iteration.
After the steps no more submits come; the test completes whatever is in flight until the
coalescer is idle, then closes it.

Checked throughout: at most one flush per key in flight, at most `max_concurrent_flushes`
calls at once, at most `max_keys_per_flush` keys per call, no flush over `max_flush_items`
unless one request alone is larger. Checked at the end: every admitted request resolved
exactly once with its own results or with the error of the flush that carried it (a cancelled
caller's items were written all the same); every key's items were flushed in submission
order, each exactly once; nothing was left waiting once the flushes stopped; the pending
count is back to 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.engine.coalescer import WriteCoalescer
from core.errors import Overloaded, StorageUnavailable

Item = tuple[int, int]  # (key, sequence number within the key)


class FlushFailed(Exception):
    """What a failing fake flush raises or answers for a key."""


@dataclass
class FlushCall:
    batch: list[tuple[int, list[Item]]]
    verdict: asyncio.Future[tuple[str, int]]  # ("ok" | "raise" | "partial", key mask)


@dataclass
class Caller:
    key: int
    items: list[Item]
    started: bool = False
    overloaded: bool = False
    result: list[str] | None = None
    error: BaseException | None = None
    resolutions: int = 0
    task: asyncio.Task[None] | None = None


@dataclass
class Harness:
    max_flush_items: int
    max_keys_per_flush: int
    max_concurrent_flushes: int
    in_flight: list[FlushCall] = field(default_factory=list)
    keys_in_flight: set[int] = field(default_factory=set)
    attempted: dict[int, list[Item]] = field(default_factory=dict)  # per key, flush order
    outcome: dict[Item, BaseException | None] = field(default_factory=dict)
    next_seq: dict[int, int] = field(default_factory=dict)
    callers: list[Caller] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    async def flush(self, batch: list[tuple[int, list[Item]]]
                    ) -> Sequence[Sequence[str] | BaseException]:
        keys = [key for key, _ in batch]
        if len(self.in_flight) >= self.max_concurrent_flushes:
            self.violations.append(f"{len(self.in_flight) + 1} flush calls at once")
        if len(keys) > self.max_keys_per_flush:
            self.violations.append(f"{len(keys)} keys in one call")
        for key, items in batch:
            if key in self.keys_in_flight:
                self.violations.append(f"two flushes of key {key} in flight")
            if len(items) > max(self.max_flush_items, 4):  # 4 = the largest single request
                self.violations.append(f"{len(items)} items in one flush of key {key}")
            self.attempted.setdefault(key, []).extend(items)
        self.keys_in_flight.update(keys)
        call = FlushCall(batch, asyncio.get_running_loop().create_future())
        self.in_flight.append(call)
        try:
            mode, mask = await call.verdict
        finally:
            self.in_flight.remove(call)
            self.keys_in_flight.difference_update(keys)
        if mode == "raise":
            error = FlushFailed("the whole call failed")
            for _, items in batch:
                self.outcome.update(dict.fromkeys(items, error))
            raise error
        answers: list[Sequence[str] | BaseException] = []
        for index, (key, items) in enumerate(batch):
            if mode == "partial" and mask >> index & 1:
                failed = FlushFailed(f"key {key} failed")
                self.outcome.update(dict.fromkeys(items, failed))
                answers.append(failed)
            else:
                self.outcome.update(dict.fromkeys(items))
                answers.append([f"{k}:{seq}" for k, seq in items])
        return answers

    async def call(self, co: WriteCoalescer[int, Item, str], caller: Caller) -> None:
        # Runs its first line only if not cancelled before its first step: `started` then
        # means the submit ran (submit has no await before it queues or refuses).
        caller.started = True
        try:
            caller.result = await co.submit(caller.key, caller.items)
            caller.resolutions += 1
        except Overloaded:
            caller.overloaded = True
        except FlushFailed as exc:
            caller.error = exc
            caller.resolutions += 1


Step = tuple[str, int, int]

steps = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 3), st.integers(1, 4)),
    st.tuples(st.sampled_from(["ok", "raise", "partial"]), st.integers(0, 7),
              st.integers(0, 7)),
    st.tuples(st.just("cancel"), st.integers(0, 63), st.just(0)),
    st.tuples(st.just("tick"), st.integers(0, 3), st.just(0)),
), max_size=60)


async def _ticks(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _scenario(h: Harness, max_pending_items: int, script: list[Step]) -> None:
    co: WriteCoalescer[int, Item, str] = WriteCoalescer(
        h.flush, max_flush_items=h.max_flush_items, max_pending_items=max_pending_items,
        max_keys_per_flush=h.max_keys_per_flush,
        max_concurrent_flushes=h.max_concurrent_flushes)
    for op, a, b in script:
        if op == "submit":
            seq = h.next_seq.get(a, 0)
            h.next_seq[a] = seq + b
            caller = Caller(a, [(a, s) for s in range(seq, seq + b)])
            caller.task = asyncio.create_task(h.call(co, caller))
            h.callers.append(caller)
        elif op in ("ok", "raise", "partial"):
            waiting = [c for c in h.in_flight if not c.verdict.done()]
            if waiting:
                waiting[a % len(waiting)].verdict.set_result((op, b))
        elif op == "cancel":
            if h.callers:
                task = h.callers[a % len(h.callers)].task
                assert task is not None
                task.cancel()
        else:
            await _ticks(a)

    # No more submits: complete everything in flight until the coalescer is idle.
    closing = asyncio.create_task(co.close())
    for _ in range(1000):
        await _ticks(5)
        waiting = [c for c in h.in_flight if not c.verdict.done()]
        for call in waiting:
            call.verdict.set_result(("ok", 0))
        if not waiting and not h.in_flight:
            break
    await _ticks(5)
    stranded = [c for c in h.callers if c.task is not None and not c.task.done()]
    assert not stranded, (f"{len(stranded)} requests still waiting with no flush in flight, "
                          f"pending_items={co.pending_items}")
    assert closing.done()
    assert co.pending_items == 0
    try:
        await co.submit(0, [(0, -1)])
        raise AssertionError("a closed coalescer admitted a submit")
    except StorageUnavailable:
        pass


def _check(h: Harness) -> None:
    assert not h.violations, h.violations
    admitted: dict[int, list[Item]] = {}
    for caller in h.callers:
        assert caller.task is not None and caller.task.done()
        if not caller.started or caller.overloaded:
            continue
        admitted.setdefault(caller.key, []).extend(caller.items)
        outcomes = {h.outcome[item] for item in caller.items}
        assert len(outcomes) == 1, "a request was split over flushes"
        (error,) = outcomes
        if caller.task.cancelled():
            assert caller.resolutions == 0
            continue
        assert caller.resolutions == 1
        if error is None:
            assert caller.result == [f"{k}:{seq}" for k, seq in caller.items]
            assert caller.error is None
        else:
            assert caller.error is error and caller.result is None
    # Every admitted item was flushed exactly once, and each key's in submission order.
    assert {k: sorted(v) for k, v in admitted.items()} == \
        {k: sorted(v) for k, v in h.attempted.items()}
    for key, items in h.attempted.items():
        assert items == sorted(items), f"key {key} flushed out of order: {items}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=steps, max_flush_items=st.integers(1, 6), max_keys_per_flush=st.integers(1, 3),
       max_concurrent_flushes=st.integers(1, 3), max_pending_items=st.integers(4, 30))
def test_every_request_resolves_once_in_key_order_within_the_flush_limits(
        script: list[Step], max_flush_items: int, max_keys_per_flush: int,
        max_concurrent_flushes: int, max_pending_items: int) -> None:
    h = Harness(max_flush_items, max_keys_per_flush, max_concurrent_flushes)
    # A private loop per example: the scenario controls every turn of it.
    loop = asyncio.new_event_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        loop.run_until_complete(_scenario(h, max_pending_items, script))
    finally:
        loop.close()
    _check(h)
    assert not errors, errors  # e.g. "Task exception was never retrieved"
