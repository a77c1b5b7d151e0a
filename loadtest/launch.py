"""Self-contained runs: a durable embedded PostgreSQL and broker processes of our own.

The server runs with fsync and synchronous_commit on (the broker's promises rest on them;
the test suite's speed settings must never leak into a benchmark). Each cell gets a fresh
database so no cell inherits another's bloat or cache.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

import httpx

from broker.ports import free_port
from core.embedded import EmbeddedPostgres, stop_process

ROOT = Path(__file__).resolve().parent.parent
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on",
           "max_connections": "400",
           # Statement statistics for profiles (loadtest.profile); negligible overhead.
           "shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all"}


class Postgres:
    """A durable embedded PostgreSQL in a temporary directory, removed with it (`settings`
    override the durable ones, for measurements that are not broker benchmarks)."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="queen-loadtest-")
        self.pg = EmbeddedPostgres(Path(self._tmp.name), settings={**DURABLE, **(settings or {})})
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        return self.pg.dsn

    def __enter__(self) -> Self:
        self.proc = self.pg.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop_process(self.proc, signal.SIGINT)
        self._tmp.cleanup()


async def fresh_database(server_url: str, *, migrate: bool = True,
                         prefix: str = "loadtest_") -> str:
    """CREATE DATABASE `<prefix><random>` on the server, schema applied unless told not to;
    answer its URL. For load tests and tests, which want a clean database each."""
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    from core.storage.hosts import connector_for
    from core.storage.migrations import apply_schema

    # The broker's connector, not asyncpg's: with several hosts (a Patroni pair), asyncpg
    # stops at a standby that has not replayed the CREATE DATABASE yet ("does not exist")
    # instead of going on to the primary.
    name = prefix + uuid.uuid4().hex[:12]
    conn = await connector_for(server_url).connect()
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    url = urlunsplit(urlsplit(server_url)._replace(path="/" + name))
    if migrate:
        conn = await connector_for(url).connect()
        try:
            await apply_schema(conn)
        finally:
            await conn.close()
    return url


class ServerProcess:
    """A server process of our own (in a session of its own), stopped on exit: SIGTERM, and
    SIGKILL after `stop_after` seconds."""

    proc: subprocess.Popen[bytes] | None = None
    stop_after: float = 15

    def started(self, proc: subprocess.Popen[bytes], answers: Callable[[], object],
                not_yet: type[Exception] | tuple[type[Exception], ...], *, name: str,
                seconds: float, every: float) -> None:
        """Keep `proc` and wait until `answers()` returns instead of raising `not_yet`;
        RuntimeError when it exits first, or (after it is stopped) when `seconds` pass."""
        self.proc = proc
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}")
            try:
                answers()
                return
            except not_yet:
                time.sleep(every)
        self.__exit__()
        raise RuntimeError(f"{name} did not answer in {seconds:g} s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop_process(self.proc, signal.SIGTERM, timeout=self.stop_after)
            self.proc = None


class Server(ServerProcess):
    """A web server process tree on 127.0.0.1, stopped on exit: hypercorn's own multi-worker
    runner serving `app` (the null app of L-HTTP), or with `supervised` the broker's web
    workers under its supervisor (`queen-broker web`, what `serve` runs)."""

    def __init__(self, app: str, *, workers: int, env: dict[str, str] | None = None,
                 supervised: bool = False, root: Path = ROOT) -> None:
        self.root = root  # the source tree the server runs from (cwd wins on sys.path)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        if supervised:
            self.command = [sys.executable, "-m", "broker.cli", "web", "--host", "127.0.0.1",
                            "--port", str(self.port), "--workers", str(workers)]
        else:
            self.command = [sys.executable, "-m", "hypercorn", "--worker-class", "uvloop",
                            "--workers", str(workers), "--bind", f"127.0.0.1:{self.port}",
                            "--graceful-timeout", "5", app]
        self.env = {**os.environ, "HOST": "127.0.0.1", "PORT": str(self.port),
                    "WORKERS": str(workers), "LOG_LEVEL": "warning", **(env or {})}

    def __enter__(self) -> Self:
        self.started(subprocess.Popen(self.command, env=self.env, cwd=self.root,
                                      start_new_session=True),
                     lambda: httpx.get(self.url + "/health", timeout=1), httpx.HTTPError,
                     name=self.command[-1], seconds=30, every=0.1)
        return self


def broker(database_url: str, workers: int, *, supervised: bool = True,
           env: dict[str, str] | None = None, root: Path = ROOT) -> Server:
    """The broker's web tier; `supervised=False` runs it under hypercorn's own multi-worker
    runner instead (what `serve` ran before it supervised its workers), for comparison.
    `root` runs another checkout of the broker (a before/after comparison: its workers
    apply that checkout's migrations to a database created without them)."""
    return Server("broker.asgi:app_from_env()", workers=workers,
                  env={"DATABASE_URL": database_url, **(env or {})}, supervised=supervised,
                  root=root)


def run_sync(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]
