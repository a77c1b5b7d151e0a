"""A connection the client has closed is closed at once, not after the keep-alive timeout;
an answer the client does not read is given up, not held forever.

hypercorn's `TCPServer` runs each connection in a task group that also holds its idle timer
(`keep_alive_timeout`, KEEP_ALIVE_TIMEOUT_SECONDS). When the client closes its side while no
request is running (it connected and went away, a load balancer's TCP check, a client that
closes an idle keep-alive connection), the read loop ends, but the task group waits for the
idle timer before the socket is closed. Until then the socket sits in CLOSE-WAIT and holds a
file descriptor: at a few hundred such connections a second a worker runs out of
descriptors, refuses every new connection, and cannot open a database connection or a spool
file either.

`PromptTCPServer` stops the idle timer once nothing more can be read, and keeps it stopped
after that: hypercorn starts it again after each answer. A request still running (a client
may half-close its side right after sending it) is answered, then the connection closes.
Measured before: a client that half-closed after its request waited the whole timeout.

A client that resets the connection while its answer is being written (it closes without
reading a large answer) ends the read loop with an error h11 never hears of; the answer's last write then completes h11's exchange, and
hypercorn, taking the connection for a reusable one, started the idle timer again after the
read loop had stopped it. The connection, its request and (through the reset's traceback,
which kept hypercorn's write frame and its data) the whole answer stayed for
KEEP_ALIVE_TIMEOUT_SECONDS, and then until the cyclic collector ran: measured, 8 such
clients of a 5 MB answer a round left 20 to 40 MB more in the workers every round.

Writes: hypercorn waits for each write to drain for as long as the client keeps the socket
open, and the keep-alive timer does not run while a request is active; an answer the client
never reads held its request, its answer and the connection without bound. A write whose
bytes make no progress towards the client for KEEP_ALIVE_TIMEOUT_SECONDS (the time the
broker lets a connection sit without progress, as for HTTP/2 in broker/stalled_h2.py)
aborts the connection: the request sees the client gone and everything is freed. A client
that reads slowly is waited for as long as it reads.
"""

from __future__ import annotations

import fcntl
import struct
import termios
from typing import Any

from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.events import Closed, Event, RawData, Updated

from core.waiting import within


class PromptTCPServer(TCPServer):
    """hypercorn's connection server, whose idle timer ends when the client's side does, and
    whose writes give up on a client that does not read."""

    reading_ended = False

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, RawData):
            async with self.send_lock:
                if self._write(event.data):
                    await self._drain()
                else:
                    await self.protocol.handle(Closed())
            return
        await super().protocol_send(event)
        if isinstance(event, Updated) and event.idle and self.reading_ended:
            # Nothing can be read any more: no next request to wait for.
            await self.idle_task.stop()

    def _write(self, data: bytes) -> bool:
        """Hand `data` to the transport; False if the connection is gone."""
        try:
            self.writer.write(data)
        except (ConnectionError, RuntimeError):
            return False
        return True

    async def _drain(self) -> None:
        # Apart from protocol_send, whose frame holds the data (see `drained`).
        if not await drained(self.writer, float(self.config.keep_alive_timeout)):
            await self.protocol.handle(Closed())

    async def _read_data(self) -> None:
        await super()._read_data()
        self.reading_ended = True
        await self.idle_task.stop()


async def drained(writer: Any, stall_seconds: float) -> bool:
    """Wait until what was written to `writer` has gone to the socket; False, with the
    connection aborted, if none of it moved for `stall_seconds`, or if the client went
    away. A slow client that reads is waited for as long as it reads (a large answer over
    a slow link). What it reads shows in the kernel's queue first: the socket takes more
    from the transport's buffer only once a good part of its own has gone.

    Apart from the callers, whose frames hold the answer: the error that ends a drain is
    also kept by the connection's reader, and its traceback keeps every frame it passed
    through, with their locals, until the cyclic collector runs. Used by the HTTP
    connections above and the Kafka listener (broker/kafka/server.py)."""
    transport = writer.transport
    try:
        while True:
            waiting = transport.get_write_buffer_size()
            if waiting == 0:
                # Nothing waits to be sent, so this cannot block (it raises if the
                # connection is lost): no timer for the common, small answer.
                await writer.drain()
                return True
            sock = writer.get_extra_info("socket")
            waiting += unsent_bytes(sock)
            try:
                await within(stall_seconds, writer.drain())
                return True
            except TimeoutError:
                if transport.get_write_buffer_size() + unsent_bytes(sock) >= waiting:
                    transport.abort()  # nothing moved for that long: give the answer up
                    return False
    except (ConnectionError, RuntimeError):
        return False


def unsent_bytes(sock: Any) -> int:
    """Bytes written to `sock` that the client has not yet acknowledged (0 if unknown)."""
    try:
        answer = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (OSError, AttributeError, ValueError):
        return 0
    return int(struct.unpack("I", answer)[0])
