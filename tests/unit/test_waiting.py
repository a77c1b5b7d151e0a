"""Timed waits keep their cancels (core/waiting.py), and nothing calls `asyncio.wait_for`.

On Python 3.11 `asyncio.wait_for` drops a cancel that arrives in the turn its inner wait
completes; a loop built on it can outlive the cancel meant to end it (a CI fault run hung
900 s on that). These tests race the two on purpose.
"""

from __future__ import annotations

import ast
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from core.waiting import wait_event, within

ROOT = Path(__file__).resolve().parent.parent.parent


async def _legacy_wait_event(event: asyncio.Event, seconds: float) -> bool:
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        pass
    return event.is_set()


async def _loop_until_cancelled(wait: Callable[[asyncio.Event, float], Awaitable[bool]],
                                kick: asyncio.Event, turns: list[int]) -> None:
    """A side task's shape: wait for a kick or a tick, do a pass, again (at most 50)."""
    for _ in range(50):
        await wait(kick, 10)
        kick.clear()
        turns.append(1)
        await asyncio.sleep(0.02)


async def _kicked_and_cancelled_in_one_turn(
        wait: Callable[[asyncio.Event, float], Awaitable[bool]]) -> bool:
    """Whether the loop ended when the cancel arrived with a kick."""
    kick, turns = asyncio.Event(), []
    task = asyncio.create_task(_loop_until_cancelled(wait, kick, turns))
    await asyncio.sleep(0)  # parked in wait()
    kick.set()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=0.3)
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    return bool(done) and task.cancelled()


async def test_wait_event_keeps_a_cancel_that_arrives_with_the_event() -> None:
    assert await _kicked_and_cancelled_in_one_turn(wait_event)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for keeps cancels from 3.12")
async def test_the_race_is_real_for_asyncio_wait_for_on_this_python() -> None:
    # Why wait_event exists: the same loop on wait_for survives its cancel.
    assert not await _kicked_and_cancelled_in_one_turn(_legacy_wait_event)


async def test_wait_event_answers_whether_the_event_was_set() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 5) is True


async def test_within_answers_the_result_or_times_out() -> None:
    assert await within(5, asyncio.sleep(0, "done")) == "done"
    with pytest.raises(TimeoutError):
        await within(0.01, asyncio.sleep(5))


def test_no_module_calls_asyncio_wait_for() -> None:
    calls = []
    for part in ("core", "broker", "loadtest"):
        for path in sorted((ROOT / part).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Attribute) and node.attr == "wait_for"
                        and isinstance(node.value, ast.Name) and node.value.id == "asyncio"):
                    calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert calls == [], "use core.waiting (wait_event, within): " + ", ".join(calls)
