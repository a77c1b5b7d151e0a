"""A connection the client has closed is closed at once, not after the keep-alive timeout.

hypercorn's `TCPServer` runs each connection in a task group that also holds its idle timer
(`keep_alive_timeout`, KEEP_ALIVE_TIMEOUT_SECONDS). When the client closes its side while no
request is running (it connected and went away, a load balancer's TCP check, a client that
closes an idle keep-alive connection), the read loop ends, but the task group waits for the
idle timer before the socket is closed. Until then the socket sits in CLOSE-WAIT and holds a
file descriptor: at a few hundred such connections a second a worker runs out of
descriptors, refuses every new connection, and cannot open a database connection or a spool
file either.

`PromptTCPServer` stops the idle timer once nothing more can be read. A request still
running (a client may half-close after sending it) is answered; hypercorn then closes the
connection, since h11 knows the client's side is closed.
"""

from __future__ import annotations

from hypercorn.asyncio.tcp_server import TCPServer


class PromptTCPServer(TCPServer):
    """hypercorn's connection server, whose idle timer ends when the client's side does."""

    async def _read_data(self) -> None:
        await super()._read_data()
        await self.idle_task.stop()
