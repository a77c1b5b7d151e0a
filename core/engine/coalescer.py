"""The per-partition write coalescer.

Every web process owns one. Pushes for the same partition that arrive while a flush of that
partition is in flight wait in the partition's lane and go out together as its next flush:
one segment row. So at most one flush per partition is in flight per process, and the
number of segments falls as concurrency rises.

Lanes that are ready (something waiting, nothing in flight) are dispatched together, up to
`max_keys_per_flush` of them in one call of the flush function, which writes them in one
statement and so one commit (docs/architecture/request-path.md, the write path): small pushes spread over many
partitions share a WAL flush instead of paying one each. Only keys of one group go in one
call (`group_of`: on Citus, the shard a partition lives on, so that each call is one
statement on one node; core/storage/shards.py). At most `max_concurrent_flushes` calls run
at once; while they run, new work gathers for the next one.

A request's future resolves only after its flush committed (or failed: then every request of
that partition's flush gets the error; nothing is retried behind the caller's back). The
number of messages held (waiting or in flight) is bounded; past the bound `submit` raises
`Overloaded`.

A call also carries at most `max_flush_bytes` of the requests' sizes (the payload bytes a
push gives with `submit`), whole requests, a larger one alone: large pushes that waited
together must not make one statement of any size (PostgreSQL refuses a value over 1 GB, and
the worker holds the statement's parameters in memory while it runs). Keys that do not fit
stay ready for the next call.
"""

from __future__ import annotations

import asyncio
import itertools
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

# Writes the flushes of several keys: (key, items in arrival order) each; answers, in the
# same order, one result per item of each flush, or the exception that flush failed with.
FlushManyFn = Callable[[list[tuple[Key, list[Item]]]],
                       Awaitable[Sequence[Sequence[Result] | BaseException]]]



@dataclass(slots=True)
class _Request(Generic[Item, Result]):
    items: list[Item]
    future: asyncio.Future[list[Result]]
    size: int = 0  # its payload bytes, against max_flush_bytes


@dataclass(slots=True)
class _Lane(Generic[Item, Result]):
    waiting: deque[_Request[Item, Result]] = field(default_factory=deque)
    busy: bool = False  # a flush of this key is in flight


class WriteCoalescer(Generic[Key, Item, Result]):
    """Merges concurrent submissions per key into flushes, one in flight per key, and
    dispatches ready keys together."""

    def __init__(self, flush: FlushManyFn[Key, Item, Result], *, max_flush_items: int,
                 max_pending_items: int, max_keys_per_flush: int = 64,
                 max_concurrent_flushes: int = 4, max_flush_bytes: int = 64 * 1024 * 1024,
                 on_flushed: Callable[[Key], None] | None = None,
                 group_of: Callable[[Key], int] | None = None) -> None:
        self._flush = flush
        self._max_flush_items = max_flush_items
        self._max_pending_items = max_pending_items
        self._max_keys = max_keys_per_flush
        self._max_concurrent = max_concurrent_flushes
        self._max_bytes = max_flush_bytes
        self._on_flushed = on_flushed
        self._group_of = group_of
        self._lanes: dict[Key, _Lane[Item, Result]] = {}
        self._ready: dict[Key, None] = {}  # keys with waiting work and no flush in flight
        self._running: set[asyncio.Task[None]] = set()
        self._pending_items = 0
        self._closed = False
        self.flushes = 0  # per-key flushes attempted, for metrics and tests
        self.calls = 0  # calls of the flush function (each one commit)

    @property
    def pending_items(self) -> int:
        return self._pending_items

    async def submit(self, key: Key, items: list[Item], *, size: int = 0) -> list[Result]:
        """Queue `items` (of `size` payload bytes) for partition `key`; answer their results
        once committed.

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
        lane.waiting.append(_Request(items, future, size))
        self._pending_items += len(items)
        if not lane.busy:
            self._ready[key] = None
        self._dispatch()
        return await asyncio.shield(future)

    def _dispatch(self) -> None:
        while self._ready and len(self._running) < self._max_concurrent:
            batch: list[tuple[Key, list[_Request[Item, Result]]]] = []
            room = self._max_bytes
            for key in self._batch_keys():
                lane = self._lanes[key]
                if batch and lane.waiting[0].size > room:
                    break  # the call is full: the key waits for the next one
                del self._ready[key]
                lane.busy = True
                requests = self._take(lane, room)
                room -= sum(r.size for r in requests)
                batch.append((key, requests))
            task = asyncio.create_task(self._run(batch), name="coalescer-flush")
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run(self, batch: list[tuple[Key, list[_Request[Item, Result]]]]) -> None:
        flushes = [(key, [item for r in requests for item in r.items]) for key, requests in batch]
        try:
            self.calls += 1
            self.flushes += len(batch)
            outcomes: Sequence[Sequence[Result] | BaseException]
            try:
                outcomes = await self._flush(flushes)
            except asyncio.CancelledError:
                for _, requests in batch:
                    _fail(requests, StorageUnavailable("the broker is shutting down"))
                raise
            except Exception as exc:  # noqa: BLE001 - every request of a failed flush learns why
                outcomes = [exc] * len(batch)
            for (key, requests), outcome in zip(batch, outcomes):
                if isinstance(outcome, BaseException):
                    _fail(requests, outcome)
                    continue
                start = 0
                for request in requests:
                    end = start + len(request.items)
                    if not request.future.done():
                        request.future.set_result(list(outcome[start:end]))
                    start = end
                if self._on_flushed is not None:
                    self._on_flushed(key)
        finally:
            # Leave the running set *before* dispatching: the done-callback that would
            # discard this task runs only later, and if every slot finished in the same loop
            # iteration, each would still count the others as running and dispatch nothing,
            # stranding ready lanes until some unrelated submit came along.
            current = asyncio.current_task()
            if current is not None:
                self._running.discard(current)
            for (key, requests), (_, items) in zip(batch, flushes):
                self._pending_items -= len(items)
                lane = self._lanes[key]
                lane.busy = False
                if lane.waiting:
                    self._ready[key] = None
                else:
                    del self._lanes[key]
            self._dispatch()

    def _batch_keys(self) -> list[Key]:
        """The ready keys of the next call: the oldest one's group, oldest first."""
        if self._group_of is None:
            return list(itertools.islice(self._ready, self._max_keys))
        keys = iter(self._ready)
        first = next(keys)
        group = self._group_of(first)
        chosen = [first]
        for key in keys:
            if len(chosen) >= self._max_keys:
                break
            if self._group_of(key) == group:
                chosen.append(key)
        return chosen

    def _take(self, lane: _Lane[Item, Result], room: int) -> list[_Request[Item, Result]]:
        """Whole requests, oldest first, up to max_flush_items and `room` bytes (always at
        least one)."""
        batch = [lane.waiting.popleft()]
        count, size = len(batch[0].items), batch[0].size
        while lane.waiting and count + len(lane.waiting[0].items) <= self._max_flush_items \
                and size + lane.waiting[0].size <= room:
            request = lane.waiting.popleft()
            batch.append(request)
            count += len(request.items)
            size += request.size
        return batch

    async def close(self) -> None:
        """Refuse new submissions and wait until everything queued has been flushed."""
        self._closed = True
        while self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)


def _fail(batch: list[_Request[Item, Result]], exc: BaseException) -> None:
    for request in batch:
        if not request.future.done():
            request.future.set_exception(exc)


def _mark_retrieved(future: asyncio.Future[Any]) -> None:
    # A caller that went away never reads its future; reading the exception here keeps
    # asyncio from logging "exception was never retrieved" for an error already reported.
    if not future.cancelled():
        future.exception()
