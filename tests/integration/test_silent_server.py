"""A database server that stops answering without closing anything (a frozen or partitioned
primary) is given up on within DB_SILENCE_TIMEOUT_MS: statements in flight fail at once as
an outage instead of waiting for the statement timeout (30 s) and the driver's 5 s on top,
and every connection the process holds to that server is cut (core/storage/liveness.py).
Every TCP connection the broker opens carries keepalives and a TCP user timeout
(core/storage/sockets.py).

The server is made silent by a proxy that stops forwarding (tests/wire_counter.py): its
kernel, like a SIGSTOPped PostgreSQL's, still acknowledges everything.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from core.errors import StorageUnavailable
from core.settings import Settings
from core.storage import hosts, liveness
from core.storage.database import Database
from core.storage.statements import Conn
from tests.wire_counter import counting_proxy

pytestmark = pytest.mark.timeout(120)


def _socket_of(conn: object) -> socket.socket:
    """The kernel socket under a pooled asyncpg connection (private attributes: asyncpg has
    no public way to it)."""
    raw = getattr(conn, "_con", conn)
    return raw._transport.get_extra_info("socket")  # type: ignore[attr-defined, no-any-return]


async def test_every_tcp_connection_carries_keepalives_and_a_user_timeout(
        database_url: str) -> None:
    async with counting_proxy(database_url, tcp=True) as (dsn, _):
        db = await Database.open(Settings(db_pool_size=1, db_silence_timeout_ms=6000), dsn,
                                 migrate=False)
        try:
            async with db.session() as conn:
                sock = _socket_of(conn)
                assert sock.family == socket.AF_INET
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 6000
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 3
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
        finally:
            await db.close()
        # A side connection (LISTEN, NOTIFY, flushers) is opened by the same connector.
        side = await hosts.connector_for(dsn).connect()
        try:
            assert _socket_of(side).getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) \
                == Settings.db_silence_timeout_ms
        finally:
            await side.close()


def test_the_connectors_defaults_are_the_settings_defaults() -> None:
    """core/settings.py imports hosts.py, so the connector keeps its own copy of them."""
    assert hosts._CONNECT_TIMEOUT == Settings.db_connection_timeout_ms / 1000
    assert hosts._SILENCE == Settings.db_silence_timeout_ms / 1000


async def test_a_statement_on_a_silent_server_fails_as_an_outage_within_the_silence_timeout(
        database_url: str) -> None:
    async with counting_proxy(database_url) as (dsn, proxy):
        db = await Database.open(Settings(db_pool_size=3, db_silence_timeout_ms=1500), dsn,
                                 migrate=False)
        try:
            async with db.session() as conn:
                assert await conn.fetchval("SELECT 1") == 1
            proxy.frozen = True  # from here the server hears nothing
            started = time.monotonic()
            with pytest.raises(StorageUnavailable):
                async with db.session() as conn:
                    # Not bounded by anything but the driver's command timeout (35 s).
                    await conn.fetchval("SELECT 2")
            waited = time.monotonic() - started
            # Silence 1.5 s, asked every second: cut within 2.5 s (+ slack for a busy box).
            assert waited < 6.0, waited
        finally:
            proxy.frozen = False
            await db.close()


async def test_every_connection_to_the_silent_server_is_cut_and_the_pool_recovers(
        database_url: str) -> None:
    async with counting_proxy(database_url) as (dsn, proxy):
        db = await Database.open(Settings(db_pool_size=3, db_silence_timeout_ms=1000), dsn,
                                 migrate=False)
        side = await hosts.connector_for(dsn).connect()  # as a LISTEN connection holds one
        try:
            lost = asyncio.Event()
            side.add_termination_listener(lambda _conn: lost.set())
            proxy.frozen = True
            await asyncio.wait_for(lost.wait(), 10)
            assert side.is_closed()
            proxy.frozen = False
            # New connections come up on the server that answers again.
            async with db.session() as conn:
                assert await conn.fetchval("SELECT 3") == 3
        finally:
            proxy.frozen = False
            side.terminate()
            await db.close()


async def test_a_busy_event_loop_is_not_taken_for_a_silent_server(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Silence is counted while the loop runs: a loop held up (a long computation in the
    process) for longer than the timeout while the answer is on its way does not make the
    watch cut connections to a server that answers."""
    real = liveness._PROBE
    held = asyncio.Event()

    class HeldUp:
        async def value(self, conn: Conn) -> object:
            answer = asyncio.ensure_future(real.value(conn))
            await asyncio.sleep(0)  # the question is out; its answer comes during the hold
            if not held.is_set():
                held.set()
                time.sleep(2.5)  # noqa: ASYNC251  (holds the loop up, on purpose)
            return await answer

    monkeypatch.setattr(liveness, "_PROBE", HeldUp())
    async with counting_proxy(database_url) as (dsn, _):
        db = await Database.open(Settings(db_pool_size=1, db_silence_timeout_ms=1000), dsn,
                                 migrate=False)
        try:
            await asyncio.wait_for(held.wait(), 10)
            await asyncio.sleep(1.5)  # the next question, too
            assert [w.forsaken for w in db._watches] == [0]
            async with db.session() as conn:
                assert await conn.fetchval("SELECT 4") == 4
        finally:
            await db.close()
