"""KeyedBatcher (core/engine/batching/batcher.py): requests on disjoint keys share a flush; requests
sharing a key never do and keep their order; a failed flush of several requests is retried
one by one, except when the database is unavailable."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import pytest

from core.engine.batching.batcher import KeyedBatcher
from core.errors import StorageError, StorageUnavailable

Req = tuple[str, ...]  # the keys a request touches; its result is its flush number


def _keys(r: Req) -> frozenset[Hashable]:
    return frozenset(r)


class Recorder:
    def __init__(self, fail: type[Exception] | None = None) -> None:
        self.flushes: list[list[Req]] = []
        self.gate = asyncio.Event()
        self.fail = fail

    async def flush(self, requests: list[Req]) -> list[int]:
        self.flushes.append(list(requests))
        await self.gate.wait()
        if self.fail is not None and len(requests) > 1:
            raise self.fail("boom")
        if self.fail is not None and requests[0] == ("bad",):
            raise self.fail("bad request")
        return [len(self.flushes)] * len(requests)


async def test_disjoint_requests_share_a_flush_and_one_key_never_appears_twice() -> None:
    rec = Recorder()
    b: KeyedBatcher[Req, int] = KeyedBatcher(rec.flush, _keys, len, max_concurrent=1)
    first = asyncio.ensure_future(b.submit(("a",)))
    await asyncio.sleep(0)  # out at once: the slot was free
    rest = [asyncio.ensure_future(b.submit(r))
            for r in [("a", "b"), ("c",), ("b",), ("d",), ("a",)]]
    await asyncio.sleep(0)
    rec.gate.set()
    results = await asyncio.gather(first, *rest)
    assert rec.flushes[0] == [("a",)]
    for flush in rec.flushes:
        keys = [k for r in flush for k in r]
        assert len(keys) == len(set(keys))
    # ("b",) waits behind ("a","b"), ("a",) behind both; ("c",) and ("d",) go at once.
    assert rec.flushes[1] == [("a", "b"), ("c",), ("d",)]
    assert results == [1, 2, 2, 3, 2, 3]
    assert rec.flushes[2] == [("b",), ("a",)]


async def test_a_failed_flush_is_retried_request_by_request() -> None:
    rec = Recorder(fail=StorageError)
    b: KeyedBatcher[Req, int] = KeyedBatcher(rec.flush, _keys, len, max_concurrent=1)
    blocker = asyncio.ensure_future(b.submit(("z",)))
    await asyncio.sleep(0)
    good, bad = asyncio.ensure_future(b.submit(("x",))), asyncio.ensure_future(b.submit(("bad",)))
    await asyncio.sleep(0)
    rec.gate.set()
    assert await blocker == 1
    assert await good == 3  # flush 2 (both) failed; flush 3 is its own
    with pytest.raises(StorageError, match="bad request"):
        await bad


async def test_an_unavailable_database_fails_the_whole_flush_without_retry() -> None:
    rec = Recorder(fail=StorageUnavailable)
    b: KeyedBatcher[Req, int] = KeyedBatcher(rec.flush, _keys, len, max_concurrent=1)
    blocker = asyncio.ensure_future(b.submit(("z",)))
    await asyncio.sleep(0)
    both = [asyncio.ensure_future(b.submit((k,))) for k in "xy"]
    await asyncio.sleep(0)
    rec.gate.set()
    await blocker
    for f in both:
        with pytest.raises(StorageUnavailable):
            await f
    assert len(rec.flushes) == 2


async def test_a_cancelled_caller_does_not_withdraw_its_request_and_close_waits() -> None:
    rec = Recorder()
    b: KeyedBatcher[Req, int] = KeyedBatcher(rec.flush, _keys, len, max_concurrent=1)
    caller = asyncio.ensure_future(b.submit(("a",)))
    await asyncio.sleep(0)
    caller.cancel()
    closing = asyncio.ensure_future(b.close())
    await asyncio.sleep(0)
    assert not closing.done()
    rec.gate.set()
    await closing
    assert rec.flushes == [[("a",)]]
