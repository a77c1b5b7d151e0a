"""The pop answers a web worker builds and sends at once, bounded by their bytes.

Each pop keeps within its own byte budget (QUEEN_POP_MAX_BYTES), but a worker serves many
pops at once, and building an answer takes a few times its messages' bytes (the segments
decompressed, the JSON pieces, the joined body, then the transport's buffer until the client
has read it). Twenty consumers of large messages popping together would hold twenty such
answers. So a pop that delivered messages holds their bytes (uncompressed, as the budget
counts them) against QUEEN_WORKER_ANSWER_MAX_BYTES from before its answer is built until it
is sent (or the client is gone), and waits its turn when the others hold too much: answers
are built and sent a few at a time instead of all at once. Kafka's brokers bound the same
thing with `queued.max.request.bytes`.

An answer larger than the whole bound is let through alone, when nothing else is held, so
no pop waits forever; a pop's lease runs while it waits, as while its answer is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class AnswerMemory:
    """Bytes held by the answers being built or sent, at most `limit` (one larger answer
    alone)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._freed = asyncio.Condition()

    async def hold(self, size: int) -> None:
        """Wait until `size` bytes fit (or nothing is held), then hold them."""
        async with self._freed:
            await self._freed.wait_for(
                lambda: self.held == 0 or self.held + size <= self.limit)
            self.held += size

    async def release(self, size: int) -> None:
        async with self._freed:
            self.held -= size
            self._freed.notify_all()

    @contextlib.asynccontextmanager
    async def held_while_built(self, size: int) -> AsyncIterator[None]:
        """Hold `size` bytes for the block, and release them if it raises (on success the
        response releases them once sent: `ReleasingResponse`)."""
        await self.hold(size)
        try:
            yield
        except BaseException:
            await self.release(size)
            raise


class ReleasingResponse(Response):
    """A response that releases its answer's bytes once it is sent, or the client is gone."""

    def __init__(self, inner: Response, memory: AnswerMemory, size: int) -> None:
        self.__dict__.update(inner.__dict__)  # its status, headers and body, as rendered
        self._inner = inner
        self._memory = memory
        self._size = size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._inner(scope, receive, send)
        finally:
            await self._memory.release(self._size)
