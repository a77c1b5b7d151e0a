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
    alone). A release never waits: it runs in a response's `finally`, where a cancelled
    send must still give the bytes back."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._waiting: list[asyncio.Future[None]] = []

    async def hold(self, size: int) -> None:
        """Wait until `size` bytes fit (or nothing is held), then hold them."""
        while self.held and self.held + size > self.limit:
            freed = asyncio.get_running_loop().create_future()
            self._waiting.append(freed)
            try:
                await freed
            finally:
                self._waiting.remove(freed)
        self.held += size

    def release(self, size: int) -> None:
        self.held -= size
        for freed in self._waiting:  # each looks again whether it fits now
            if not freed.done():
                freed.set_result(None)

    @contextlib.asynccontextmanager
    async def held_while_built(self, size: int) -> AsyncIterator[None]:
        """Hold `size` bytes for the block, and release them if it raises (on success the
        response releases them once sent: `ReleasingResponse`)."""
        await self.hold(size)
        try:
            yield
        except BaseException:
            self.release(size)
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
            self._memory.release(self._size)
