"""A Kafka client that resets its connection while the listener is still answering it is a
client gone away, not an error of the listener (broker/kafka/server.py)."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import Any

import pytest
import uvloop

from broker.kafka import protocol
from broker.kafka.protocol import Request
from broker.kafka.server import Listener, api_versions
from broker.kafka.session import Session
from tests.kafka.wire import request


def test_a_reset_while_a_request_is_answered_logs_no_error(
        caplog: pytest.LogCaptureFixture) -> None:
    """The listener runs on uvloop, whose transports refuse a write once the peer reset the
    connection (RuntimeError): that was logged as an error with its traceback."""
    answered = asyncio.Event()

    async def slow_api_versions(session: Session, request: Request) -> dict[str, Any]:
        await asyncio.sleep(0.3)  # the client resets meanwhile
        answered.set()
        return await api_versions(session, request)

    async def main() -> None:
        listener = Listener(None, advertised=None, max_request_bytes=1 << 20)  # type: ignore[arg-type]
        listener.handlers[protocol.API_VERSIONS] = slow_api_versions
        server = await asyncio.start_server(listener.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(request(protocol.API_VERSIONS, 0, b""))
        await asyncio.sleep(0.1)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset, not a polite close
        await asyncio.wait_for(answered.wait(), 5)
        while listener.connections:
            await asyncio.sleep(0.01)
        server.close()
        await server.wait_closed()

    with caplog.at_level(logging.INFO, logger="queen.kafka"):
        uvloop.run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
