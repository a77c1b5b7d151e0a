"""One web worker: the broker app served by hypercorn on a listening socket it inherited.

`queen-broker serve` and `queen-broker web` bind the socket once and run N of these
(`python -m broker.worker --fd N`), so a worker that dies is replaced while the others keep
accepting from the same socket, and connections waiting in its backlog are not lost.

A stop (SIGTERM or SIGINT) drains, in this order:

1. `draining` is set: parked long polls answer 204 now, new pops do not park, and answers
   carry `Connection: close`, so each connection closes after its answer;
2. the worker stops accepting, and gives connections it has just accepted a moment
   (`ACCEPT_GRACE` from their accept) to deliver their request; connections accepted
   earlier have had that moment already, so with none recent there is no wait;
3. idle keep-alive connections are closed; requests in flight run to their end, so a push
   that was accepted commits and is answered;
4. the app's lifespan closes the write coalescer (flushing what it still holds) and the pool.

Requests in flight are cut off only after `drain_seconds`, which is longer than the database
timeouts any of them can wait on, so in practice they never are.

With TLS on (TLS_CERT_FILE, core/tls.py) the socket speaks TLS: HTTP/2 when the client
offers it in the handshake (ALPN), HTTP/1.1 otherwise; the identity of a verified client
certificate rides in each request's scope (broker/tls/peer.py); SIGHUP, or a change of the
files, loads new certificates for the connections to come (broker/tls/rotation.py).

If the broker's core fails while serving (one of its side tasks died: `core.service.Broker`),
its lifespan ends with the error; the worker then stops the same way and exits with status 1,
so whoever supervises it counts a death and starts a new worker.

The serving loop is hypercorn's (its connection, protocol and lifespan classes), run by us
rather than by `hypercorn.asyncio.serve` for one reason: hypercorn closes idle connections
*before* it stops accepting, so a connection accepted in that instant is closed while its
request may already be running: the push is written and its answer lost. Stopping the accept
first, then waiting `ACCEPT_GRACE`, removes that window.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
from collections.abc import Sequence
from typing import cast

import uvloop
from hypercorn.asyncio.lifespan import Lifespan
from hypercorn.asyncio.worker_context import WorkerContext
from hypercorn.config import Config
from hypercorn.typing import AppWrapper, LifespanState
from hypercorn.utils import wrap_app
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from broker import malformed, stalled_h2
from broker.collector import tune_garbage_collector
from broker.connection import PromptTCPServer
from broker.descriptors import raise_open_files_limit
from broker.one_write import OneWriteWriter
from broker.tls.peer import WithClientIdentity, client_identity
from broker.tls.rotation import CertificateRotation
from core.env import SettingsError
from core.logs import configure_logging
from core.settings import Settings, from_env_or_exit

log = logging.getLogger("queen.worker")

BACKLOG = 1024  # connections the kernel queues while every worker is busy or restarting
# How long after its accept a connection may take to deliver its request before a stopping
# worker closes it as idle: a client sends its request right after connecting, well within
# this.
ACCEPT_GRACE = 0.5


def drain_seconds(settings: Settings) -> float:
    """How long a stopping worker lets requests in flight finish: past the longest a database
    call can take (statement timeout, then the client-side command timeout 5 s later)."""
    if settings.db_statement_timeout_ms:
        return settings.db_statement_timeout_ms / 1000 + 10
    return 60.0


def hypercorn_config(settings: Settings) -> Config:
    config = Config()
    config.backlog = BACKLOG
    config.graceful_timeout = drain_seconds(settings)
    # Also bounds a connection that has not sent (all of) its request yet.
    config.keep_alive_timeout = settings.keep_alive_timeout_s
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


class CloseWhenClosing:
    """ASGI wrapper: an answer says `Connection: close` whenever the connection will close
    after it, so a keep-alive client never sends its next request on a closed connection
    ("Server disconnected without sending a response"):

    - while draining (the worker is stopping);
    - when the request's body has not been read to its end by the time the answer starts
      (a redirect, a 401, 404 or 405 answered before the body arrived): hypercorn cannot
      start the connection's next exchange then and closes it, without saying so itself.
    """

    def __init__(self, app: ASGIApp, draining: asyncio.Event) -> None:
        self._app = app
        self._draining = draining

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        # HTTP/1 only: an HTTP/2 stream ends on its own, and there the header is not allowed.
        body_pending = scope.get("http_version", "1.1").startswith("1") and _has_body(scope)

        async def receive_watched() -> Message:
            nonlocal body_pending
            message = await receive()
            body_ended = message["type"] == "http.disconnect" or (
                message["type"] == "http.request" and not message.get("more_body", False))
            if body_ended:
                body_pending = False
            return message

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and (
                    body_pending or self._draining.is_set()):
                headers = [h for h in message.get("headers", ()) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self._app(scope, receive_watched, send_closing)


def _has_body(scope: Scope) -> bool:
    """Whether the request announced a body (a non-zero Content-Length, or chunks)."""
    for name, value in scope.get("headers", ()):
        name = name.lower()
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


async def run(settings: Settings, fd: int) -> int:
    """Serve until stopped; answer the exit status (1 when the broker's core failed)."""
    from broker.app import create_app

    draining = asyncio.Event()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # HTTP/2 when the client offers it in the TLS handshake (ALPN), else HTTP/1.1.
    rotation = (CertificateRotation(settings.tls, alpn=("h2", "http/1.1"))
                if settings.tls.enabled else None)
    if rotation is not None:
        rotation.reload_on_hangup()  # from now: start-up may wait a while for the database
    app = CloseWhenClosing(create_app(settings, draining=draining), draining)
    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    config = hypercorn_config(settings)
    # starlette's and hypercorn's ASGI type aliases describe the same protocol differently.
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")  # type: ignore[arg-type]
    return await serve(wrapped, config, sock, stop, draining, rotation)


async def serve(app: AppWrapper, config: Config, sock: socket.socket, stop: asyncio.Event,
                draining: asyncio.Event, rotation: CertificateRotation | None = None) -> int:
    """Serve `app` on `sock` until `stop` is set or the app's lifespan fails, then drain
    (see the module docstring); answer 0, or 1 after a lifespan failure. With `rotation`,
    over TLS, with the certificates it keeps current."""
    loop = asyncio.get_running_loop()
    state: LifespanState = {}
    lifespan = Lifespan(app, config, loop, state)
    lifespan_task = loop.create_task(lifespan.handle_lifespan(), name="lifespan")
    # Start-up may wait for the database for a while; a stop must not wait for that.
    starting = asyncio.ensure_future(lifespan.wait_for_startup())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not starting.done():
        log.info("stopped while starting")
        for task in (starting, lifespan_task):
            task.cancel()
        await asyncio.gather(starting, lifespan_task, return_exceptions=True)
        return 0
    starting.result()
    if lifespan_task.done() and (error := lifespan_task.exception()) is not None:
        raise error  # the app could not start (e.g. no database in time): exit, be restarted
    tune_garbage_collector()
    malformed.install()  # refusals of malformed HTTP/1.1 requests say what was wrong
    stalled_h2.install()  # an HTTP/2 answer the client never lets through is reset

    context = WorkerContext(None)
    connections: dict[asyncio.Task[None], float] = {}  # each open connection: its accept time

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connections[task] = loop.time()
        task.add_done_callback(lambda done: connections.pop(done, None))
        identity = client_identity(writer.get_extra_info("ssl_object"))
        served = app if identity is None else WithClientIdentity(app, identity)
        # The server uses only the writer's methods OneWriteWriter has (broker/one_write.py).
        one_write = cast(asyncio.StreamWriter, OneWriteWriter(writer))
        await PromptTCPServer(served, loop, config, context, state, reader, one_write)

    tls = rotation.context if rotation is not None else None
    host, port = sock.getsockname()[:2]
    try:
        # Listened here first because uvloop's server, when its own listen() fails, closes
        # the socket without a word: the next use of it says only "bad file descriptor".
        # It fails when another socket bound to the same port with SO_REUSEADDR listens
        # first (ours is bound but not listening until a worker is ready).
        sock.listen(config.backlog)
    except OSError as exc:
        log.error("cannot listen on %s:%d (%s): another process listens on this port",
                  host, port, exc.strerror)
        await _end_lifespan(lifespan, lifespan_task)
        return 1
    server = await asyncio.start_server(
        on_connection, sock=sock, backlog=config.backlog, ssl=tls,
        ssl_handshake_timeout=config.ssl_handshake_timeout if tls is not None else None)
    log.info("serving on %s://%s:%d", "http" if tls is None else "https", host, port)
    watching = (loop.create_task(rotation.watch(stop), name="tls-watch")
                if rotation is not None else None)
    failed = False
    try:
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({stopping, lifespan_task}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not stop.is_set():
            failed = True
            error = None if lifespan_task.cancelled() else lifespan_task.exception()
            log.error("the broker's core stopped (%r); this worker exits to be replaced",
                      error)
        log.info("stopping: answering parked long polls, finishing requests in flight")
        draining.set()
        server.close()
        # Until the newest connection has had ACCEPT_GRACE since its accept (a fixed wait
        # here cost every stop half a second whenever any connection was open, even one
        # idle for minutes).
        if connections:
            await _wait_tasks(set(connections),
                              max(connections.values()) + ACCEPT_GRACE - loop.time())
        await context.terminated.set()  # closes idle keep-alive connections
        await _wait_tasks(set(connections), config.graceful_timeout)
        for task in list(connections):
            task.cancel()  # past every database timeout: nothing better is left to do
        await asyncio.gather(*connections, return_exceptions=True)
    finally:
        if watching is not None:
            watching.cancel()
        await _end_lifespan(lifespan, lifespan_task)
    return 1 if failed else 0


async def _end_lifespan(lifespan: Lifespan, lifespan_task: asyncio.Task[None]) -> None:
    """Run the app's shutdown (the coalescer's last flush, the pool) unless it ended."""
    if not lifespan_task.done():
        await lifespan.wait_for_shutdown()
    lifespan_task.cancel()
    await asyncio.gather(lifespan_task, return_exceptions=True)


async def _wait_tasks(tasks: set[asyncio.Task[None]], timeout: float) -> None:
    if tasks and timeout > 0:
        await asyncio.wait(list(tasks), timeout=timeout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker.worker",
                                     description="one web worker on an inherited socket")
    parser.add_argument("--fd", type=int, required=True,
                        help="file descriptor of the listening socket")
    args = parser.parse_args(argv)
    settings = from_env_or_exit("queen-broker worker")
    configure_logging(settings.log_level)
    raise_open_files_limit()  # each connection is a descriptor
    try:
        return uvloop.run(run(settings, args.fd))
    except SettingsError as exc:  # the TLS files changed for the worse since the check
        print(f"queen-broker worker: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
