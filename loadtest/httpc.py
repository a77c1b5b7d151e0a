"""A minimal keep-alive HTTP/1.1 client for 127.0.0.1.

The generator shares two cores with the broker and PostgreSQL, so every microsecond it
spends in a general-purpose client is stolen from the system under test. This client writes
pre-built request bytes and reads Content-Length or chunked answers, nothing else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from core.waiting import within


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    headers: dict[bytes, bytes]


class HttpError(Exception):
    """The connection broke or the answer was not HTTP we understand."""


class Connection:
    """One persistent connection; requests on it are strictly sequential."""

    def __init__(self, url: str, headers: Mapping[str, str] | None = None) -> None:
        """`headers` go with every request (e.g. Authorization)."""
        parts = urlsplit(url)
        if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"load is only ever sent to this machine, not {parts.hostname}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self._extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except (OSError, ConnectionError):
                pass
        self._reader = self._writer = None

    async def request(self, method: str, path: str, body: bytes | None = None,
                      timeout: float = 30.0, content_type: str = "application/json") -> Answer:
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{self._extra}"
        if body is not None:
            head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        data = head.encode() + b"\r\n" + (body or b"")
        for attempt in (0, 1):  # reconnect once: the server may have closed an idle socket
            if self._writer is None:
                await self._open()
            assert self._reader is not None and self._writer is not None
            try:
                self._writer.write(data)
                return await within(timeout, self._read())
            except (OSError, ConnectionError, asyncio.IncompleteReadError) as exc:
                await self.close()
                if attempt:
                    raise HttpError(str(exc) or type(exc).__name__) from exc
            except TimeoutError:
                await self.close()
                raise
        raise HttpError("unreachable")

    async def _read(self) -> Answer:
        assert self._reader is not None
        head = await self._reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        try:
            status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError) as exc:
            raise HttpError(f"bad status line {lines[0]!r}") from exc
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            if b":" in line:
                k, v = line.split(b":", 1)
                headers[k.strip().lower()] = v.strip()
        if status == 204 or status == 304:
            body = b""
        elif b"content-length" in headers:
            body = await self._reader.readexactly(int(headers[b"content-length"]))
        elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = await self._read_chunked()
        else:  # no length: the body runs to the end of the connection
            body = await self._reader.read()
            await self.close()
        if headers.get(b"connection", b"").lower() == b"close":
            await self.close()
        return Answer(status, body, headers)

    async def _read_chunked(self) -> bytes:
        assert self._reader is not None
        parts: list[bytes] = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)
