"""An HTTP/1.1 answer leaves in one write: its head waits for its body.

hypercorn writes a response's head and its body as two writes, and each goes out at once
(asyncio sets TCP_NODELAY): two system calls, two TCP segments and two wake-ups of the client
for every answer. On the cost cell (`python -m loadtest cost`) the head's write alone took
about as much of a web worker's CPU as the body's. `OneWriteWriter` stands between hypercorn
and the connection's writer and holds a final response head until the next write, which it
then sends together with the head (one `writelines`, one system call).

Why holding is safe: after a final head (status 200 and above) hypercorn's next write on the
connection is that response's body, or its end (an empty write, when there is no body), or
the connection closes; each of those sends the head first. An interim head (`100 Continue`,
`101 Switching Protocols`) is sent at once, since the client waits for it before it goes on.
HTTP/2 frames never begin with an HTTP/1.1 status line, so an HTTP/2 connection passes
through untouched.
"""

from __future__ import annotations

import asyncio
from typing import Any

_STATUS_LINE = b"HTTP/1.1 "
_HEAD_END = b"\r\n\r\n"


def is_final_head(data: bytes) -> bool:
    """Whether `data` is exactly an HTTP/1.1 response head with a final status (≥ 200)."""
    status = len(_STATUS_LINE)
    return (data.startswith(_STATUS_LINE) and data[status:status + 1] != b"1"
            and data.endswith(_HEAD_END))


class OneWriteWriter:
    """The parts of `asyncio.StreamWriter` hypercorn's connection uses, over a real one."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        head, self._head = self._head, None
        if head is None:
            if is_final_head(data):
                self._head = data
            else:
                self._writer.write(data)
        elif data:
            self._writer.writelines((head, data))
        else:
            self._writer.write(head)

    async def drain(self) -> None:
        # A held head is not in the transport yet: there is nothing of it to wait for.
        await self._writer.drain()

    def write_eof(self) -> None:
        self._send_held()
        self._writer.write_eof()

    def close(self) -> None:
        self._send_held()
        self._writer.close()

    async def wait_closed(self) -> None:
        await self._writer.wait_closed()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._writer.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        # Whatever else a later hypercorn asks of its writer is the real writer's (only the
        # writes above need the held head).
        return getattr(self._writer, name)

    def _send_held(self) -> None:
        head, self._head = self._head, None
        if head is not None and not self._writer.is_closing():
            self._writer.write(head)
