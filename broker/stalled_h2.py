"""An HTTP/2 answer the client does not let through is reset, not held forever.

HTTP/2 lets the client say how much of an answer it is ready to receive (its flow-control
window); hypercorn sends no more until the client opens the window further. A client that
never does (a window of 0 in its SETTINGS, or no WINDOW_UPDATE after the first 64 KiB) keeps
the request running: its task, the answer's bytes, and a pop's lease on its messages, for as
long as the connection stays open, which nothing bounded: the keep-alive timer does not run
while a request is active. Over HTTP/1.1 the same needs an answer larger than the socket
buffers (megabytes); over HTTP/2 any answer can be stalled, on up to 100 streams per
connection.

`StallBoundH2Protocol` gives each step of sending an answer's body (at most 32 KiB waiting
in the stream's buffer, hypercorn's high-water mark) `KEEP_ALIVE_TIMEOUT_SECONDS`, the time
the broker already lets a connection sit without progress. An answer that makes no progress
for that long is reset (RST_STREAM, CANCEL) and its request sees the client gone; the
connection and its other streams go on.

`install()` makes hypercorn's connections use it; `broker/worker.py` calls it once, before it
serves. It relies on hypercorn's HTTP/2 protocol class keeping `connection` (the h2
connection), `stream_buffers` and `priority`; tests/integration/test_h2_abuse.py
fails if a later hypercorn changes them.
"""

from __future__ import annotations

from typing import Any

import h2.errors
import h2.exceptions
import hypercorn.protocol
from hypercorn.protocol.events import Body, Data, EndBody, EndData, StreamClosed, Trailers
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.h2 import H2Protocol
from priority.priority import MissingStreamError

from core.waiting import within

# The steps that wait for the client's window: a body chunk into a full buffer, or the end
# of the answer (waits until the buffer is sent).
_WAITS_FOR_WINDOW = (Body, Data, EndBody, EndData, Trailers)


class StallBoundH2Protocol(H2Protocol):
    """hypercorn's HTTP/2 protocol, which resets a stream whose answer cannot move."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stall_seconds = float(self.config.keep_alive_timeout)

    async def stream_send(self, event: StreamEvent) -> None:
        if not isinstance(event, _WAITS_FOR_WINDOW):
            await super().stream_send(event)
            return
        try:
            await within(self.stall_seconds, super().stream_send(event))
        except TimeoutError:
            await self._reset_stalled(event.stream_id)

    async def _reset_stalled(self, stream_id: int) -> None:
        try:
            self.connection.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        except h2.exceptions.ProtocolError:
            pass  # the stream closed meanwhile: nothing to tell the client
        buffer = self.stream_buffers.pop(stream_id, None)
        if buffer is not None:
            await buffer.close()
        try:
            self.priority.remove_stream(stream_id)
        except MissingStreamError:
            pass
        await self._flush()
        # As when a stream ends: the request's next receive() says http.disconnect, and the
        # connection learns whether it is idle now (its keep-alive timer runs again).
        await super().stream_send(StreamClosed(stream_id=stream_id))


def install() -> None:
    """Make the connections hypercorn serves from now on use `StallBoundH2Protocol`."""
    hypercorn.protocol.H2Protocol = StallBoundH2Protocol  # type: ignore[attr-defined]
