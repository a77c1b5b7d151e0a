"""The official client's wire modes (wire-protocol §7), and a transport that proves which
one was used.

The official-client integration tests run once per mode. A client in a binary mode still
sends JSON where the binary bodies cannot carry an item (a trace id, a transactionId over
65535 bytes), and a broker may answer a framed pop in JSON; `WireLog` records every
exchange so each test can check, at the end, that the client spoke the mode whenever it
could, and that the broker answered framed pops framed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from queen import Queen

BINARY = "application/x-queen-push"
FRAMED = "application/x-queen-pop"

CLIENT_MODES: dict[str, dict[str, bool]] = {
    "json": {},
    "binary": {"binary_push": True},
    "binary-zstd": {"binary_push": True, "push_compression": True},
    # Frames end to end: framed pushes stored as they came, framed pops.
    "frames": {"binary_push": True, "push_compression": True, "framed_pop": True},
}


@dataclass
class Exchange:
    method: str
    path: str
    query: str
    request_type: str
    request_body: bytes
    status: int
    answer_type: str


@dataclass
class WireLog(httpx.AsyncBaseTransport):
    """An httpx transport to the real broker that keeps a record of every exchange."""

    exchanges: list[Exchange] = field(default_factory=list)
    inner: httpx.AsyncHTTPTransport = field(default_factory=httpx.AsyncHTTPTransport)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        response = await self.inner.handle_async_request(request)
        self.exchanges.append(Exchange(
            request.method, request.url.path, request.url.query.decode(),
            request.headers.get("content-type", ""), body, response.status_code,
            response.headers.get("content-type", "")))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()

    def check(self, mode: str) -> None:
        """The client spoke `mode` wherever it could, and framed pops were answered framed."""
        options = CLIENT_MODES[mode]
        binary_push = options.get("binary_push", False)
        compressed = options.get("push_compression", False)
        framed = options.get("framed_pop", False)
        for e in self.exchanges:
            binary = e.request_type == BINARY
            if e.method == "POST" and e.path == "/api/v1/push":
                if binary:  # QPB1, framed groups (8) with compression, plain (4) without
                    assert binary_push and e.request_body[:5] == (
                        b"QPB1\x08" if compressed else b"QPB1\x04"), e
                else:
                    assert not (binary_push and _binary_able(
                        json.loads(e.request_body)["items"])), e
            if e.method == "POST" and e.path == "/api/v1/transaction":
                if binary:
                    assert compressed and e.request_body[:4] == b"QTB1", e
                else:
                    assert not (compressed and _pushes(json.loads(e.request_body))), e
            if e.path.startswith("/api/v1/pop"):
                assert ("frames=true" in e.query) == framed, e
                if e.status == 200:
                    assert (e.answer_type == FRAMED) == framed, e


def _binary_able(items: list[dict[str, Any]]) -> bool:
    """Whether the client could have sent these JSON push items as a binary body."""
    return all(item.get("traceId") is None and len(str(item.get("transactionId", "")).encode())
               <= 0xFFFF for item in items)


def _pushes(body: dict[str, Any]) -> list[Any]:
    """Pushed items of a JSON transaction that the binary transaction body could carry."""
    items = [item for op in body.get("operations", []) if op.get("type") == "push"
             for item in op.get("items", [op])]
    return items if items and _binary_able(items) else []


@asynccontextmanager
async def official_client(url: str, mode: str) -> AsyncIterator[Queen]:
    """The official client in `mode`; on a clean exit, checks the wire as `WireLog.check`."""
    log = WireLog()
    async with Queen(url, transport=log, **CLIENT_MODES[mode]) as client:
        yield client
    log.check(mode)
