"""The connection pool and the boundary where driver errors become core errors.

Route code never sees asyncpg exceptions: everything that leaves this module as an error is a
`StorageUnavailable` (the database cannot be reached: 503 and retry) or a `StorageError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg

from core.errors import StorageError, StorageUnavailable
from core.migrations import apply_migrations
from core.queries import QUERIES
from core.settings import Settings

log = logging.getLogger(__name__)

# SQLSTATE classes that mean "the server is not there for us right now".
_UNAVAILABLE_CLASSES = ("08", "53", "57")


def translate(exc: BaseException) -> Exception:
    """Map a driver or network error to StorageUnavailable / StorageError."""
    if isinstance(exc, (StorageError, StorageUnavailable)):
        return exc
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", "") or ""
        if state[:2] in _UNAVAILABLE_CLASSES and state != "57014":  # 57014 = statement timeout
            return StorageUnavailable()
        return StorageError(f"database error {state}: {exc}")
    if isinstance(exc, (OSError, asyncpg.InterfaceError, asyncpg.InternalClientError,
                        asyncio.TimeoutError, ConnectionError)):
        return StorageUnavailable()
    return StorageError(f"database failure: {exc!r}")


# Errors `storage_errors` converts; anything else (our own bugs) passes through untouched.
# InternalClientError is included because the pool raises it when it resets (on release) a
# connection whose server died in the middle of a statement ("cannot switch to state 15;
# another operation is in progress"): during a database crash that is an outage, not a bug.
DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError,
                 OSError, asyncio.TimeoutError, ConnectionError)


@contextlib.contextmanager
def storage_errors() -> Any:
    try:
        yield
    except DRIVER_ERRORS as exc:
        raise translate(exc) from exc


def server_settings(settings: Settings) -> dict[str, str]:
    return {
        "application_name": "queen-broker",
        "statement_timeout": str(settings.db_statement_timeout_ms),
        "lock_timeout": str(settings.db_lock_timeout_ms),
        # Our statements are small and keyed; JIT compilation only adds latency to them.
        "jit": "off",
    }


class Database:
    """A pool plus named-statement helpers that translate driver errors."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings) -> None:
        self.pool = pool
        self._acquire_timeout = settings.db_connection_timeout_ms / 1000

    @classmethod
    async def open(cls, settings: Settings, dsn: str, *, migrate: bool = True,
                   wait_seconds: float = 30.0) -> Database:
        """Wait for the server (up to `wait_seconds`), apply migrations, open the pool."""
        if migrate:
            conn = await connect_with_retry(dsn, settings, wait_seconds)
            try:
                await apply_migrations(conn)
            finally:
                await conn.close()
        pool = await asyncpg.create_pool(
            dsn, min_size=1, max_size=settings.db_pool_size,
            timeout=settings.db_connection_timeout_ms / 1000,
            server_settings=server_settings(settings),
            max_inactive_connection_lifetime=300, reset=_reset_connection,
            # A server that stops answering (stopped, partitioned) must not hang requests
            # forever: give up a little after the server-side statement timeout would have.
            command_timeout=settings.db_statement_timeout_ms / 1000 + 5
            if settings.db_statement_timeout_ms else None)
        assert pool is not None
        return cls(pool, settings)

    async def close(self) -> None:
        await self.pool.close()

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        with storage_errors():
            async with self.pool.acquire(timeout=self._acquire_timeout) as conn:
                yield conn  # type: ignore[misc]  # a pool proxy behaves as a Connection

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        with storage_errors():
            async with self.pool.acquire(timeout=self._acquire_timeout) as conn, \
                    conn.transaction():
                yield conn  # type: ignore[misc]

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self.connection() as conn:
            with storage_errors():
                return list(await conn.fetch(QUERIES[query], *args))

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        async with self.connection() as conn:
            with storage_errors():
                return await conn.fetchrow(QUERIES[query], *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        async with self.connection() as conn:
            with storage_errors():
                return await conn.fetchval(QUERIES[query], *args)

    async def ping(self, timeout: float = 2.0) -> bool:
        try:
            async with asyncio.timeout(timeout):
                async with self.connection() as conn:
                    with storage_errors():
                        await conn.fetchval("SELECT 1")
            return True
        except (StorageUnavailable, StorageError, TimeoutError):
            return False


async def _reset_connection(conn: asyncpg.Connection) -> None:
    """What a pooled connection needs before reuse.

    asyncpg's default reset runs RESET ALL / UNLISTEN / advisory unlock / CLOSE ALL: a round
    trip on every release, i.e. on every statement of the hot path. Pool connections never
    LISTEN, take session advisory locks, SET parameters or declare cursors (those live on
    dedicated connections), so the only state that can leak is an open transaction.
    """
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


async def connect_with_retry(dsn: str, settings: Settings,
                             wait_seconds: float) -> asyncpg.Connection:
    """One connection, retried until the server answers or `wait_seconds` pass.

    Processes started side by side (honcho, the serve supervisor) may come up before
    PostgreSQL accepts connections; waiting here saves every caller a retry loop.
    """
    deadline = time.monotonic() + wait_seconds
    delay = 0.1
    while True:
        try:
            return await asyncpg.connect(
                dsn, timeout=settings.db_connection_timeout_ms / 1000,
                server_settings=server_settings(settings))
        except DRIVER_ERRORS as exc:
            if time.monotonic() + delay > deadline:
                raise translate(exc) from exc
            log.info("database not ready (%s); retrying", type(exc).__name__)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
