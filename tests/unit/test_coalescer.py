"""Coalescer decisions, driven by a fake flush function whose progress the test controls."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Sequence

import pytest

from core.engine.coalescer import FlushManyFn, WriteCoalescer
from core.errors import Overloaded, StorageUnavailable


class FakeFlush:
    """Records every flush; each one waits until the test opens the gate (or fails it)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []
        self.written: list[int] = []
        self.gate = asyncio.Event()
        self.in_flight: dict[str, int] = {}
        self.max_in_flight: dict[str, int] = {}
        self.max_total_in_flight = 0
        self.failures: dict[int, Exception] = {}  # call number (1-based) -> error to raise

    async def __call__(self, key: str, items: list[int]) -> Sequence[str]:
        self.calls.append((key, list(items)))
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
        self.max_in_flight[key] = max(self.max_in_flight.get(key, 0), self.in_flight[key])
        self.max_total_in_flight = max(self.max_total_in_flight, sum(self.in_flight.values()))
        try:
            await self.gate.wait()
            failure = self.failures.get(len(self.calls))
            if failure is not None:
                raise failure
            self.written.extend(items)
            return [f"{key}:{item}" for item in items]
        finally:
            self.in_flight[key] -= 1


def one_by_one(flush: FakeFlush) -> FlushManyFn[str, int, str]:
    """The coalescer's many-partition flush, made of concurrent single-key flushes."""
    async def flush_many(batch: list[tuple[str, list[int]]]
                         ) -> list[Sequence[str] | BaseException]:
        return list(await asyncio.gather(*(flush(key, items) for key, items in batch),
                                         return_exceptions=True))
    return flush_many


def _coalescer(flush: FakeFlush, *, max_flush: int = 1000,
               max_pending: int = 10_000) -> WriteCoalescer[str, int, str]:
    return WriteCoalescer(one_by_one(flush), max_flush_items=max_flush,
                          max_pending_items=max_pending)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_submits_arriving_during_a_flush_go_out_together_as_the_next_flush() -> None:
    flush = FakeFlush()
    co = _coalescer(flush)
    first = asyncio.create_task(co.submit("p", [0]))
    await _settle()
    rest = [asyncio.create_task(co.submit("p", [i])) for i in range(1, 11)]
    await _settle()
    assert flush.calls == [("p", [0])]  # the ten wait behind the flush in flight
    flush.gate.set()
    results = await asyncio.gather(first, *rest)
    assert flush.calls == [("p", [0]), ("p", list(range(1, 11)))]
    assert co.flushes == 2
    assert results == [[f"p:{i}"] for i in range(11)]
    assert co.pending_items == 0


async def test_at_most_one_flush_per_key_is_in_flight_but_keys_flush_in_parallel() -> None:
    flush = FakeFlush()
    co = _coalescer(flush)
    tasks = [asyncio.create_task(co.submit(key, [i])) for i in range(20) for key in ("a", "b")]
    await _settle()
    assert flush.max_total_in_flight == 2
    flush.gate.set()
    await asyncio.gather(*tasks)
    assert flush.max_in_flight == {"a": 1, "b": 1}
    assert sorted(flush.written) == sorted(list(range(20)) * 2)


async def test_results_are_sliced_per_request_in_request_order() -> None:
    flush = FakeFlush()
    co = _coalescer(flush)
    blocker = asyncio.create_task(co.submit("p", [99]))
    await _settle()
    sizes = [3, 1, 4, 1, 5]
    requests, start = [], 0
    for n in sizes:
        requests.append(list(range(start, start + n)))
        start += n
    tasks = [asyncio.create_task(co.submit("p", r)) for r in requests]
    await _settle()
    flush.gate.set()
    assert await blocker == ["p:99"]
    answers = await asyncio.gather(*tasks)
    assert answers == [[f"p:{i}" for i in r] for r in requests]
    assert flush.calls[1] == ("p", list(range(sum(sizes))))


async def test_flush_takes_whole_requests_up_to_the_item_limit() -> None:
    flush = FakeFlush()
    co = _coalescer(flush, max_flush=5)
    blocker = asyncio.create_task(co.submit("p", [0]))
    await _settle()
    tasks = [asyncio.create_task(co.submit("p", [i, i])) for i in range(1, 5)]
    big = asyncio.create_task(co.submit("p", list(range(7))))  # over the limit on its own
    await _settle()
    flush.gate.set()
    await asyncio.gather(blocker, big, *tasks)
    assert [items for _, items in flush.calls] == [
        [0], [1, 1, 2, 2], [3, 3, 4, 4], list(range(7))]


async def test_a_statement_takes_whole_requests_up_to_the_byte_limit() -> None:
    """Large pushes that waited together went out as one statement of any size (PostgreSQL
    refuses a value over 1 GB, and the worker builds the whole statement in memory): a
    statement now carries up to `max_flush_bytes` of payload, a larger request alone, and
    the keys that do not fit wait for the next one."""
    flush = FakeFlush()
    co = WriteCoalescer(one_by_one(flush), max_flush_items=1000, max_pending_items=10_000,
                        max_flush_bytes=100, max_concurrent_flushes=1)
    blocker = asyncio.create_task(co.submit("p", [0], size=1))
    await _settle()
    tasks = [asyncio.create_task(co.submit("p", [i], size=40)) for i in range(1, 4)]
    tasks += [asyncio.create_task(co.submit(k, [i], size=60)) for i, k in ((4, "a"), (5, "b"))]
    tasks.append(asyncio.create_task(co.submit("c", [6], size=500)))  # over it on its own
    await _settle()
    flush.gate.set()
    await asyncio.gather(blocker, *tasks)
    # One key a call here: a and b (60 each) do not fit together, c is alone, and p, ready
    # again last, goes out in two calls of 80 and 40.
    assert co.calls == 6
    assert flush.calls == [("p", [0]), ("a", [4]), ("b", [5]), ("c", [6]), ("p", [1, 2]),
                           ("p", [3])]


async def test_a_failing_flush_fails_every_request_in_it_and_the_next_flush_still_runs() -> None:
    flush = FakeFlush()
    boom = RuntimeError("disk on fire")
    flush.failures[2] = boom
    co = _coalescer(flush)
    blocker = asyncio.create_task(co.submit("p", [0]))
    await _settle()
    doomed = [asyncio.create_task(co.submit("p", [i])) for i in range(1, 6)]
    await _settle()
    flush.gate.set()
    assert await blocker == ["p:0"]
    outcomes = await asyncio.gather(*doomed, return_exceptions=True)
    assert outcomes == [boom] * 5
    assert flush.calls == [("p", [0]), ("p", [1, 2, 3, 4, 5])]
    assert flush.written == [0]
    assert co.pending_items == 0
    # The lane is not poisoned: the next submission flushes normally.
    assert await co.submit("p", [6]) == ["p:6"]


async def test_backlog_over_the_bound_raises_overloaded_and_queues_nothing() -> None:
    flush = FakeFlush()
    co = _coalescer(flush, max_pending=5)
    # An empty coalescer admits a request of any size, so a big push is never refused forever.
    big = asyncio.create_task(co.submit("p", list(range(8))))
    await _settle()
    assert co.pending_items == 8
    with pytest.raises(Overloaded):
        await co.submit("q", [100])
    assert co.pending_items == 8
    flush.gate.set()
    assert len(await big) == 8
    assert flush.written == list(range(8))
    # Below the bound again: admitted.
    small = asyncio.create_task(co.submit("p", [1, 2]))
    await _settle()
    more = asyncio.create_task(co.submit("q", [3, 4, 5]))
    assert await small == ["p:1", "p:2"] and await more == ["q:3", "q:4", "q:5"]


async def test_cancelled_caller_does_not_cancel_its_write() -> None:
    flush = FakeFlush()
    co = _coalescer(flush)
    blocker = asyncio.create_task(co.submit("p", [0]))
    await _settle()
    impatient = asyncio.create_task(co.submit("p", [1, 2]))
    await _settle()
    impatient.cancel()
    with pytest.raises(asyncio.CancelledError):
        await impatient
    flush.gate.set()
    await blocker
    await _settle()
    assert flush.calls == [("p", [0]), ("p", [1, 2])]
    assert flush.written == [0, 1, 2]
    assert co.pending_items == 0


async def test_cancelled_caller_of_a_failed_flush_leaves_no_unretrieved_exception() -> None:
    flush = FakeFlush()
    flush.failures[1] = RuntimeError("nobody is listening")
    co = _coalescer(flush)
    seen: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        caller = asyncio.create_task(co.submit("p", [1]))
        await _settle()
        caller.cancel()
        flush.gate.set()
        await _settle()
        await co.close()
        del caller
        gc.collect()
        await _settle()
    finally:
        loop.set_exception_handler(previous)
    assert seen == []


async def test_close_waits_for_queued_flushes_and_then_refuses_new_submissions() -> None:
    flush = FakeFlush()
    co = _coalescer(flush)
    tasks = [asyncio.create_task(co.submit("p", [i])) for i in range(3)]
    await _settle()
    closing = asyncio.create_task(co.close())
    await _settle()
    assert not closing.done()
    flush.gate.set()
    await closing
    assert flush.written == [0, 1, 2]
    assert [t.result() for t in tasks] == [["p:0"], ["p:1"], ["p:2"]]
    with pytest.raises(StorageUnavailable):
        await co.submit("p", [3])


async def test_work_left_waiting_when_every_flush_slot_finishes_at_once_still_goes_out() -> None:
    # Every slot busy, two more keys ready behind them, then no further submit: when the
    # busy flushes finish in the same loop iteration, the waiting keys must still be
    # flushed (a push must never wait for some later push to wake the coalescer).
    flush = FakeFlush()
    co = WriteCoalescer(one_by_one(flush), max_flush_items=1000, max_pending_items=10_000,
                        max_keys_per_flush=1, max_concurrent_flushes=2)
    busy = [asyncio.create_task(co.submit(key, [i])) for i, key in enumerate("ab")]
    await _settle()
    waiting = [asyncio.create_task(co.submit(key, [i])) for i, key in enumerate("cd", 2)]
    await _settle()
    assert [key for key, _ in flush.calls] == ["a", "b"]
    flush.gate.set()  # both busy flushes complete in the same iteration
    results = await asyncio.wait_for(asyncio.gather(*busy, *waiting), timeout=2)
    assert results == [["a:0"], ["b:1"], ["c:2"], ["d:3"]]
    assert co.pending_items == 0
