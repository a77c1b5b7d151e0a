"""A PostgreSQL protocol proxy that counts round trips, per kind of client connection.

It sits between the broker and the server (a Unix socket or TCP, like the server it fronts)
and reads the frontend messages a client sends: a round trip of the extended protocol ends
with Sync ('S'), one of the simple protocol is a Query ('Q'). Connections are told apart by
the application_name of their startup packet, so the pool's connections ('queen-broker')
are counted apart from the wake-up connections ('queen-broker-wakeup').
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from core.storage.hosts import connector_for, dsn_hosts

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104


class RoundTrips:
    """Round trips counted so far, per application_name."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        # While set, the proxy forwards nothing more to the server (a frozen server, as
        # seen from the client: its connections stay open and nothing is answered).
        self.frozen = False

    def of(self, application: str) -> int:
        return self.counts[application]

    def reset(self) -> None:
        self.counts.clear()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _client_to_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            trips: RoundTrips) -> None:
    try:
        application = ""
        while True:  # startup phase: length-prefixed packets without a type byte
            head = await reader.readexactly(4)
            (length,) = struct.unpack("!I", head)
            body = await reader.readexactly(length - 4)
            writer.write(head + body)
            await writer.drain()
            (code,) = struct.unpack("!I", body[:4])
            if code in (_SSL_REQUEST, _GSS_REQUEST):
                continue  # the server answers 'N'; the real startup packet follows
            parts = body[4:].split(b"\0")
            params = dict(zip(parts[0::2], parts[1::2]))
            application = params.get(b"application_name", b"").decode()
            break
        while True:  # typed messages
            head = await reader.readexactly(5)
            kind, length = head[:1], struct.unpack("!I", head[1:])[0]
            body = await reader.readexactly(length - 4)
            if kind in (b"S", b"Q"):
                trips.counts[application] += 1
            while trips.frozen:
                await asyncio.sleep(0.05)
            writer.write(head + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _one_host(dsn: str) -> str:
    """A DSN naming several hosts (an HA pair) is narrowed to the primary it reaches now, as
    the broker's own connector finds it: the proxy fronts one server."""
    if len(dsn_hosts(dsn)) < 2:
        return dsn
    conn = await connector_for(dsn).connect()
    try:
        row = await conn.fetchrow("SELECT host(inet_server_addr()) AS host,"
                                  " inet_server_port() AS port")
    finally:
        await conn.close()
    assert row is not None and row["host"], "the primary of a multi-host DSN is reached by TCP"
    url = urlsplit(dsn)
    user = url.netloc.rsplit("@", 1)[0] + "@" if "@" in url.netloc else ""
    query = {k: v[0] for k, v in parse_qs(url.query).items()
             if k not in ("target_session_attrs", "host", "port")}
    return urlunsplit(url._replace(netloc=f"{user}{row['host']}:{row['port']}",
                                   query=urlencode(query)))


@contextlib.asynccontextmanager
async def counting_proxy(dsn: str, *, tcp: bool = False
                         ) -> AsyncIterator[tuple[str, RoundTrips]]:
    """Yield a DSN that reaches the same database through the counting proxy. The proxy
    listens as the server does (a Unix socket or TCP), or on TCP (127.0.0.1) with `tcp`."""
    url = urlsplit(await _one_host(dsn))
    query = parse_qs(url.query)
    socket_dir = query.get("host", [url.hostname or ""])[0]
    port = int(query.get("port", [url.port or 5432])[0])
    trips = RoundTrips()
    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if socket_dir.startswith("/"):
            up_reader, up_writer = await asyncio.open_unix_connection(
                f"{socket_dir}/.s.PGSQL.{port}")
        else:
            up_reader, up_writer = await asyncio.open_connection(socket_dir, port)
        for coro in (_client_to_server(reader, up_writer, trips), _pipe(up_reader, writer)):
            task = asyncio.create_task(coro)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    with tempfile.TemporaryDirectory(prefix="pgproxy-") as tmp:
        if socket_dir.startswith("/") and not tcp:
            server = await asyncio.start_unix_server(serve, path=str(Path(tmp) / f".s.PGSQL.{port}"))
            proxied = {**{k: v[0] for k, v in query.items()}, "host": tmp, "port": str(port)}
            target = urlunsplit(url._replace(query=urlencode(proxied)))
        else:
            server = await asyncio.start_server(serve, "127.0.0.1", 0)
            proxy_port = server.sockets[0].getsockname()[1]
            netloc = url.netloc.rsplit("@", 1)
            host = f"127.0.0.1:{proxy_port}"
            rest = {k: v[0] for k, v in query.items() if k not in ("host", "port")}
            target = urlunsplit(url._replace(
                netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host,
                query=urlencode(rest)))
        try:
            yield target, trips
        finally:
            server.close()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
