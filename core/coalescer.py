"""The per-partition write coalescer.

Every web process owns one. Pushes for the same partition that arrive while a flush of that
partition is in flight wait in the partition's lane and go out together as the next flush:
one transaction, one segment row. So at most one flush per partition is in flight per
process, and the number of commits falls as concurrency rises.

A request's future resolves only after its flush committed (or failed: then every request of
that flush gets the error; nothing is retried behind the caller's back). The number of
messages held (waiting or in flight) is bounded; past the bound `submit` raises `Overloaded`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from core.errors import Overloaded, StorageUnavailable

log = logging.getLogger(__name__)

Item = TypeVar("Item")
Result = TypeVar("Result")
Key = TypeVar("Key")

# Writes one flush: the items of a partition, in arrival order; answers one result per item.
FlushFn = Callable[[Key, list[Item]], Awaitable[Sequence[Result]]]


@dataclass(slots=True)
class _Request(Generic[Item, Result]):
    items: list[Item]
    future: asyncio.Future[list[Result]]


@dataclass(slots=True)
class _Lane(Generic[Item, Result]):
    waiting: deque[_Request[Item, Result]] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


class WriteCoalescer(Generic[Key, Item, Result]):
    """Merges concurrent submissions per key into flushes, one in flight per key."""

    def __init__(self, flush: FlushFn[Key, Item, Result], *, max_flush_items: int,
                 max_pending_items: int,
                 on_flushed: Callable[[Key], None] | None = None) -> None:
        self._flush = flush
        self._max_flush_items = max_flush_items
        self._max_pending_items = max_pending_items
        self._on_flushed = on_flushed
        self._lanes: dict[Key, _Lane[Item, Result]] = {}
        self._pending_items = 0
        self._closed = False
        self.flushes = 0  # flushes attempted, for metrics and tests

    @property
    def pending_items(self) -> int:
        return self._pending_items

    async def submit(self, key: Key, items: list[Item]) -> list[Result]:
        """Queue `items` for partition `key`; answer their results once committed.

        Raises Overloaded when the backlog is full (nothing was queued), the flush's error
        when the write failed. Cancelling the caller does not cancel the write: once queued,
        items are written whether or not anybody still waits for the answer.
        """
        if self._closed:
            raise StorageUnavailable("the broker is shutting down")
        # An empty coalescer always admits a request, however large, so a single big push
        # within the body limit can never be refused forever.
        if self._pending_items and self._pending_items + len(items) > self._max_pending_items:
            raise Overloaded()
        future: asyncio.Future[list[Result]] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_mark_retrieved)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        lane.waiting.append(_Request(items, future))
        self._pending_items += len(items)
        if lane.task is None:
            lane.task = asyncio.create_task(self._drain(key, lane), name=f"coalescer-flush-{key}")
        return await asyncio.shield(future)

    async def _drain(self, key: Key, lane: _Lane[Item, Result]) -> None:
        try:
            while lane.waiting:
                batch = self._take(lane)
                items = [item for request in batch for item in request.items]
                try:
                    self.flushes += 1
                    results = await self._flush(key, items)
                except asyncio.CancelledError:
                    _fail(batch, StorageUnavailable("the broker is shutting down"))
                    raise
                except Exception as exc:  # noqa: BLE001 - every request of a failed flush learns why
                    _fail(batch, exc)
                else:
                    start = 0
                    for request in batch:
                        end = start + len(request.items)
                        if not request.future.done():
                            request.future.set_result(list(results[start:end]))
                        start = end
                    if self._on_flushed is not None:
                        self._on_flushed(key)
                finally:
                    self._pending_items -= len(items)
        finally:
            lane.task = None
            if not lane.waiting:
                self._lanes.pop(key, None)
            else:  # cancelled with requests still waiting
                _fail(list(lane.waiting), StorageUnavailable("the broker is shutting down"))
                lane.waiting.clear()
                self._lanes.pop(key, None)

    def _take(self, lane: _Lane[Item, Result]) -> list[_Request[Item, Result]]:
        """Whole requests, oldest first, up to max_flush_items (always at least one)."""
        batch = [lane.waiting.popleft()]
        count = len(batch[0].items)
        while lane.waiting and count + len(lane.waiting[0].items) <= self._max_flush_items:
            request = lane.waiting.popleft()
            batch.append(request)
            count += len(request.items)
        return batch

    async def close(self) -> None:
        """Refuse new submissions and wait for every queued flush to finish."""
        self._closed = True
        tasks = [lane.task for lane in self._lanes.values() if lane.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _fail(batch: list[_Request[Item, Result]], exc: BaseException) -> None:
    for request in batch:
        if not request.future.done():
            request.future.set_exception(exc)


def _mark_retrieved(future: asyncio.Future[Any]) -> None:
    # A caller that went away never reads its future; reading the exception here keeps
    # asyncio from logging "exception was never retrieved" for an error already reported.
    if not future.cancelled():
        future.exception()
