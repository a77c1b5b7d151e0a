"""The bound on the pop answers a worker builds and sends at once (broker/answer_memory.py)."""

from __future__ import annotations

import asyncio

import pytest

from broker.answer_memory import AnswerMemory


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_hold_past_the_limit_waits_for_a_release() -> None:
    memory = AnswerMemory(1000)
    await memory.hold(600)
    waiting = asyncio.create_task(memory.hold(500))
    await _settle()
    assert not waiting.done() and memory.held == 600
    memory.release(600)
    await asyncio.wait_for(waiting, 1)
    assert memory.held == 500


async def test_an_answer_larger_than_the_limit_goes_alone() -> None:
    memory = AnswerMemory(1000)
    await asyncio.wait_for(memory.hold(5000), 1)  # nothing held: let through
    waiting = asyncio.create_task(memory.hold(1))
    await _settle()
    assert not waiting.done()
    memory.release(5000)
    await asyncio.wait_for(waiting, 1)


async def test_a_build_that_fails_releases_what_it_held() -> None:
    memory = AnswerMemory(1000)
    with pytest.raises(RuntimeError):
        async with memory.held_while_built(700):
            assert memory.held == 700
            raise RuntimeError("the answer could not be built")
    assert memory.held == 0


async def test_a_hold_cancelled_while_waiting_holds_nothing_and_leaves_no_waiter() -> None:
    """A client that goes while its pop waits for room: nothing held, nothing left behind."""
    memory = AnswerMemory(1000)
    await memory.hold(900)
    waiting = asyncio.create_task(memory.hold(500))
    await _settle()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    memory.release(900)
    assert memory.held == 0 and not memory._waiting
