"""The fault harness ends its own background loops, even one that drops a cancel.

A CI run hung for its whole 900 s timeout in `Run.teardown`: the cross-broker wake-up loop
lost the cancel meant to end it (Python 3.11's `asyncio.wait_for` drops a cancel that
arrives in the same turn as its inner result) and teardown awaited it for good. That the
race is real on this Python is shown in tests/unit/test_waiting.py.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from loadtest.faults.base import RunConfig
from loadtest.faults.run import Run, cancel_until_done


async def _drops_cancels(futures: list[asyncio.Future[None]], rounds: int = 40) -> None:
    """A loop around `wait_for` whose awaited future completes as the cancel arrives."""
    loop = asyncio.get_running_loop()
    for _ in range(rounds):
        futures.append(loop.create_future())
        await asyncio.wait_for(futures[-1], 10)
        await asyncio.sleep(0.05)


async def _started_then_cancelled_racing_its_result() -> tuple[asyncio.Task[None],
                                                                  list[asyncio.Future[None]]]:
    futures: list[asyncio.Future[None]] = []
    task = asyncio.create_task(_drops_cancels(futures), name="drops-cancels")
    await asyncio.sleep(0)  # it now waits on futures[-1]
    futures[-1].set_result(None)
    task.cancel()
    return task, futures


async def test_cancel_until_done_ends_a_loop_that_dropped_the_first_cancel() -> None:
    task, _ = await _started_then_cancelled_racing_its_result()
    started = time.monotonic()
    left = await cancel_until_done([task], timeout=5)
    assert left == set() and task.done()
    assert time.monotonic() - started < 2


async def test_cancel_until_done_gives_up_at_its_timeout() -> None:
    released = asyncio.Event()

    async def refuses_until_released() -> None:
        while not released.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(refuses_until_released())
    await asyncio.sleep(0)
    started = time.monotonic()
    left = await cancel_until_done([task], timeout=0.6)
    assert left == {task} and 0.5 < time.monotonic() - started < 2
    released.set()
    task.cancel()
    await asyncio.wait({task}, timeout=1)
    assert task.done()


async def test_run_teardown_returns_although_a_background_loop_dropped_its_cancel(
        tmp_path: Path) -> None:
    run = Run(RunConfig(out_dir=tmp_path))
    task, _ = await _started_then_cancelled_racing_its_result()
    run._tasks = [task]
    await asyncio.wait_for(run.teardown(), 15)
    assert task.done()
