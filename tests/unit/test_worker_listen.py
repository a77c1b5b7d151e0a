"""A web worker whose port another process took says so and exits; it does not crash.

The supervisor binds the port with SO_REUSEADDR and does not listen (the first ready worker
does), so another socket bound the same way may listen first. uvloop's server then closed
our socket silently and the worker died on "bad file descriptor" at its next use of it, as
one did in CI when two test brokers were handed the same port.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
import uvloop
from hypercorn.config import Config
from hypercorn.typing import ASGIReceiveCallable as Receive
from hypercorn.typing import ASGISendCallable as Send
from hypercorn.typing import Scope
from hypercorn.utils import wrap_app

from broker.worker import serve


def _bound(port: int = 0) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


class _LifespanOnly:
    """An app with a lifespan and nothing to serve: records whether its shutdown ran."""

    def __init__(self) -> None:
        self.shut_down = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "lifespan"
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.shut_down = True
                await send({"type": "lifespan.shutdown.complete"})
                return


def test_a_port_another_process_listens_on_ends_the_worker_with_a_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    ours = _bound()
    port = ours.getsockname()[1]
    theirs = _bound(port)
    theirs.listen()
    app = _LifespanOnly()
    config = Config()

    async def run() -> int:
        wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")
        return await serve(wrapped, config, ours, asyncio.Event(), asyncio.Event())

    try:
        with caplog.at_level(logging.ERROR, logger="queen.worker"):
            status = uvloop.run(run())
    finally:
        ours.close()
        theirs.close()
    assert status == 1
    assert app.shut_down
    [record] = [r for r in caplog.records if r.name == "queen.worker"]
    assert f"cannot listen on 127.0.0.1:{port}" in record.getMessage()
    assert "another process listens on this port" in record.getMessage()
