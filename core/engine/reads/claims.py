"""Concurrent pops of one request on a worker, served by one statement.

Pops that ask for the same thing (the same `PopRequest`: queue or discovery route,
partition, group, batch, partitions, subscription rule, autoAck, lease length) form one
line per worker. The first goes out at once, alone, with the single-pop statement (an
unloaded broker answers as fast as without the line); those that arrive while it is in
flight gather, and go out together as one `queen.pop_shared` statement: each still gets its
own lease over its own partitions, as if the pops had run one after the other, and the
shares after the first fruitless one cost nothing (the same request would find nothing
either). Waiting pops woken together by one push therefore cost one statement, not one
each racing for the same span.

A share whose caller left before its statement went out is not claimed at all; one whose
caller leaves while the statement runs is leased to nobody and delivered again when its
lease ends (as for a single pop whose client disconnects mid-statement). Failures reach
every share of the statement (they are one request).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from core.engine.pop import PopRequest, PopResult, pop, pop_shares
from core.errors import StorageUnavailable
from core.storage.database import Database

# Shares per statement: bounds the statement's run time (shares run one after the other).
MAX_SHARES = 32


@dataclass(slots=True)
class _Share:
    hints: Sequence[int]
    gone: asyncio.Event | None
    future: asyncio.Future[PopResult]


class PopLines:
    def __init__(self, db: Database, *, max_shares: int = MAX_SHARES) -> None:
        self._db = db
        self._max_shares = max_shares
        self._lines: dict[PopRequest, list[_Share]] = {}  # requests with a statement out
        self._tasks: set[asyncio.Task[None]] = set()
        self.statements = 0  # claim statements sent (for tests and figures)
        self.shares = 0  # pops they served

    async def claim(self, request: PopRequest, hints: Sequence[int] = (),
                    gone: asyncio.Event | None = None) -> PopResult:
        """Claim for one pop, with the pops of the same request waiting on this worker."""
        share = _Share(hints, gone, asyncio.get_running_loop().create_future())
        line = self._lines.get(request)
        if line is not None:
            line.append(share)
        else:
            self._lines[request] = [share]
            task = asyncio.get_running_loop().create_task(self._serve(request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            return await asyncio.shield(share.future)
        except asyncio.CancelledError:
            share.future.cancel()  # not sent yet: withdrawn; sent: leased to nobody
            raise

    async def _serve(self, request: PopRequest) -> None:
        line = self._lines[request]
        try:
            while line:
                batch: list[_Share] = []
                while line and len(batch) < self._max_shares:
                    share = line.pop(0)
                    if share.future.done():
                        continue  # its caller was cancelled before it went out
                    if share.gone is not None and share.gone.is_set():
                        share.future.set_result(PopResult(None))  # never lease to the gone
                        continue
                    batch.append(share)
                if batch:
                    await self._send(request, batch)
        finally:
            del self._lines[request]
            for share in line:  # only when cancelled (the worker stops)
                if not share.future.done():
                    share.future.set_exception(StorageUnavailable("the broker is stopping"))

    async def _send(self, request: PopRequest, batch: list[_Share]) -> None:
        hints = list(dict.fromkeys(h for share in batch for h in share.hints))
        self.statements += 1
        self.shares += len(batch)
        try:
            if len(batch) == 1:
                results = [await pop(self._db, request, hints)]
            else:
                results = await pop_shares(self._db, request, len(batch), hints)
        except asyncio.CancelledError:
            for share in batch:
                _settle(share.future, StorageUnavailable("the broker is stopping"))
            raise
        except Exception as exc:  # noqa: BLE001 - every share is the same request: all learn it
            for share in batch:
                _settle(share.future, exc)
            return
        for share, result in zip(batch, results, strict=True):
            if not share.future.done():  # else its caller left: leased to nobody
                share.future.set_result(result)

    async def close(self) -> None:
        """Let the statements in flight finish (their pops get their answers)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _settle(future: asyncio.Future[PopResult], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
