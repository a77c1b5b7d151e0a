"""Concurrent requests applied together: one flush (one statement, one commit) for many.

A request names the keys it touches (for an ack: its (group, partition) pairs). Requests
that share a key never go out in the same flush and keep their arrival order across
flushes, so each request gets exactly the verdicts it would get alone, applied after the
requests it arrived behind (a flush combines only requests on disjoint keys, and the
statement decides per key). At most `max_concurrent` flushes run at once; a request that
arrives with a slot free goes out at once (no timer: an unloaded broker answers as fast as
without the batcher), and while the slots are busy new requests gather for the next flush.

A request's future resolves only after its flush returned, i.e. after the commit: a process
killed mid-flush has answered nobody of that flush. When the database is unavailable the
whole flush fails with that error (the clients retry, as they would without the batcher);
any other failure of a flush of several requests is retried request by request, so one
request's data can never fail another's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from core.errors import StorageUnavailable

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Res = TypeVar("Res")

# Applies requests on disjoint keys together; answers one result per request, in order.
FlushFn = Callable[[list[Req]], Awaitable[Sequence[Res]]]


@dataclass(slots=True)
class _Waiting(Generic[Req, Res]):
    request: Req
    keys: frozenset[Hashable]
    size: int
    future: asyncio.Future[Res]


class KeyedBatcher(Generic[Req, Res]):
    def __init__(self, flush: FlushFn[Req, Res], keys: Callable[[Req], frozenset[Hashable]],
                 size: Callable[[Req], int], *, max_concurrent: int = 2,
                 max_flush_items: int = 5000) -> None:
        self._flush = flush
        self._keys = keys
        self._size = size
        self._max_concurrent = max_concurrent
        self._max_items = max_flush_items
        self._waiting: list[_Waiting[Req, Res]] = []
        self._busy_keys: set[Hashable] = set()  # keys of the flushes in flight
        self._tasks: set[asyncio.Task[None]] = set()
        self.flushes = 0  # flushes run (for tests and figures)

    async def submit(self, request: Req) -> Res:
        """Apply `request` in some flush; answers its result once that flush returned."""
        future: asyncio.Future[Res] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(request, self._keys(request), self._size(request),
                                      future))
        self._dispatch()
        # Cancelling the caller does not withdraw the request: it is applied with its
        # flush, like a statement whose client went away after sending it.
        return await asyncio.shield(future)

    async def close(self) -> None:
        """Wait for the flushes in flight and those still waiting."""
        while self._tasks or self._waiting:
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            else:
                self._dispatch()
                await asyncio.sleep(0)

    def _dispatch(self) -> None:
        while len(self._tasks) < self._max_concurrent:
            batch = self._take()
            if not batch:
                return
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _take(self) -> list[_Waiting[Req, Res]]:
        """The next flush: waiting requests in arrival order, skipping (and holding back
        everything behind on the same keys) those whose keys a flush in flight or an
        earlier request of this flush touches."""
        taken: list[_Waiting[Req, Res]] = []
        blocked: set[Hashable] = set(self._busy_keys)
        left: list[_Waiting[Req, Res]] = []
        items = 0
        for w in self._waiting:
            if (w.keys & blocked) or (taken and items + w.size > self._max_items):
                blocked |= w.keys
                left.append(w)
                continue
            blocked |= w.keys
            items += w.size
            taken.append(w)
        self._waiting = left
        for w in taken:
            self._busy_keys |= w.keys
        return taken

    async def _run(self, batch: list[_Waiting[Req, Res]]) -> None:
        try:
            self.flushes += 1
            try:
                results = await self._flush([w.request for w in batch])
            except asyncio.CancelledError:
                for w in batch:
                    _settle(w.future, error=StorageUnavailable("the broker is shutting down"))
                raise
            except StorageUnavailable as e:
                for w in batch:
                    _settle(w.future, error=e)
            except Exception as e:  # noqa: BLE001 - every request of the flush learns why
                if len(batch) == 1:
                    _settle(batch[0].future, error=e)
                else:
                    log.warning("a flush of %d requests failed (%r); retrying one by one",
                                len(batch), e)
                    for w in batch:
                        try:
                            [result] = await self._flush([w.request])
                        except Exception as one:  # noqa: BLE001 - its own caller learns why
                            _settle(w.future, error=one)
                        else:
                            _settle(w.future, result=result)
            else:
                for w, result in zip(batch, results, strict=True):
                    _settle(w.future, result=result)
        finally:
            for w in batch:
                self._busy_keys -= w.keys
            task = asyncio.current_task()
            if task is not None:
                self._tasks.discard(task)  # its slot is free for what gathered meanwhile
            self._dispatch()


def _settle(future: asyncio.Future[Res], *, result: Res | None = None,
            error: BaseException | None = None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
        # The caller may have gone (it awaits a shield): reading the exception here keeps
        # asyncio from logging "exception was never retrieved" for an error it was given.
        future.add_done_callback(lambda f: f.exception())
    else:
        future.set_result(result)  # type: ignore[arg-type]
