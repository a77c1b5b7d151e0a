"""The HTTP port refuses connections until a web worker can answer them.

The supervisor used to listen on the port before its workers had started: while they
imported, connected to the database and opened their pools, the kernel accepted connections
into the backlog and every request waited there, past any client's deadline (a broker
restarted under load held requests for 16 s in the fault suite). Now the supervisor only
binds the port (so a second broker on it still fails at once) and the first worker that is
ready listens: a client is refused at once, retries or goes to another broker, and is
answered promptly once it gets in.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from tests.served import Served, fresh_connections
from tests.support import free_port
from tests.wire_counter import counting_proxy


@contextlib.asynccontextmanager
async def _forward(port: int, to_port: int) -> AsyncIterator[None]:
    """Accept on 127.0.0.1:`port` and pass the bytes both ways to 127.0.0.1:`to_port`."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", to_port)
        for coro in (pipe(reader, up_writer), pipe(up_reader, writer)):
            task = asyncio.create_task(coro)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


async def test_the_port_refuses_until_a_worker_is_ready_then_answers(
        database_url: str, tmp_path: Path) -> None:
    async with counting_proxy(database_url, tcp=True) as (proxied, _trips):
        # The broker's database is reached through a port where nothing listens yet: the
        # workers wait for it (up to 30 s) before they can serve anything.
        url = urlsplit(proxied)
        db_port, proxy_port = free_port(), url.port
        assert proxy_port is not None
        late_dsn = urlunsplit(url._replace(
            netloc=url.netloc.replace(f":{proxy_port}", f":{db_port}")))
        broker = Served(tmp_path / "web.log", command="web", workers=1,
                        env={"DATABASE_URL": late_dsn})
        broker.start(wait=False)
        try:
            async with fresh_connections(broker.url, timeout=10) as client:
                # The port is bound at once; its worker starts, then waits for the database
                # (up to 30 s). Every request meanwhile is refused at once, none is held.
                refused = 0
                for _ in range(600):
                    await asyncio.sleep(0.05)
                    assert broker.proc is not None and broker.proc.poll() is None, broker.log()
                    try:
                        answer = await client.get("/health")
                    except httpx.ConnectError:
                        refused += 1  # the client learns at once that nobody serves
                    else:
                        raise AssertionError(f"answered {answer.status_code} with no database")
                    if refused >= 5 and "database not ready" in broker.log():
                        break
                else:
                    raise AssertionError(f"the worker never waited for the database:\n"
                                         f"{broker.log()}")
                async with _forward(db_port, proxy_port):
                    for _ in range(300):
                        with contextlib.suppress(httpx.ConnectError):
                            answer = await client.get("/health")
                            break
                        await asyncio.sleep(0.1)
                    else:
                        raise AssertionError(f"never served:\n{broker.log()}")
                    assert answer.status_code == 200, answer.text
                    pushed = await client.post("/api/v1/push", json={"items": [
                        {"queue": "listen-when-ready", "transactionId": "t1", "payload": 1}]})
                    assert pushed.status_code == 201, pushed.text
        finally:
            await asyncio.to_thread(broker.stop)
