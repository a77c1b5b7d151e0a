"""One web worker: the broker app served by hypercorn on a listening socket it inherited.

`queen-broker serve` and `queen-broker web` bind the socket once and run N of these
(`python -m broker.worker --fd N`), so a worker that dies is replaced while the others keep
accepting from the same socket, and connections waiting in its backlog are not lost.

A stop (SIGTERM or SIGINT) drains, in this order:

1. `draining` is set: parked long polls answer 204 now, new pops do not park, and answers
   carry `Connection: close` so clients open their next request elsewhere;
2. hypercorn stops accepting and closes idle keep-alive connections; requests in flight run
   to their end, so a push that was accepted commits and is answered;
3. the app's lifespan closes the write coalescer (flushing what it still holds) and the pool.

Requests in flight are cut off only after `drain_seconds`, which is longer than the database
timeouts any of them can wait on, so in practice they never are.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

import uvloop
from hypercorn.asyncio import serve
from hypercorn.config import Config
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.logs import configure_logging
from core.settings import Settings, SettingsError

log = logging.getLogger("queen.worker")

BACKLOG = 1024  # connections the kernel queues while every worker is busy or restarting


def drain_seconds(settings: Settings) -> float:
    """How long a stopping worker lets requests in flight finish: past the longest a database
    call can take (statement timeout, then the client-side command timeout 5 s later)."""
    if settings.db_statement_timeout_ms:
        return settings.db_statement_timeout_ms / 1000 + 10
    return 60.0


def hypercorn_config(settings: Settings, fd: int) -> Config:
    config = Config()
    config.bind = [f"fd://{fd}"]
    config.backlog = BACKLOG
    config.graceful_timeout = drain_seconds(settings)
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


class CloseWhileDraining:
    """ASGI wrapper: while draining, every answer says `Connection: close`, so a keep-alive
    client does not send its next request on a connection this worker is about to close."""

    def __init__(self, app: ASGIApp, draining: asyncio.Event) -> None:
        self._app = app
        self._draining = draining

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and self._draining.is_set():
                headers = [h for h in message.get("headers", ()) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self._app(scope, receive, send_closing)


async def run(settings: Settings, fd: int) -> None:
    from broker.app import create_app

    draining = asyncio.Event()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def shutdown_trigger() -> None:
        await stop.wait()
        log.info("stopping: answering parked long polls, finishing requests in flight")
        draining.set()

    app = CloseWhileDraining(create_app(settings, draining=draining), draining)
    # starlette's and hypercorn's ASGI type aliases describe the same protocol differently.
    await serve(app, hypercorn_config(settings, fd),  # type: ignore[arg-type]
                shutdown_trigger=shutdown_trigger, mode="asgi")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker.worker",
                                     description="one web worker on an inherited socket")
    parser.add_argument("--fd", type=int, required=True,
                        help="file descriptor of the listening socket")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"queen-broker worker: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    uvloop.run(run(settings, args.fd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
