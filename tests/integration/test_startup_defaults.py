"""Safe defaults at start: where `web` listens when nobody said, and `migrate` on a fresh
data directory (it starts the embedded PostgreSQL it needs, or fails in one line)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import asyncpg
import psutil

from core.embedded import CONNECTION_HEADROOM, EmbeddedPostgres
from tests.served import Served
from tests.support import PYTHON, ROOT, server_data_dir
from tests.tokens import AUTH_ENV

# No listen address from the environment: the broker decides.
NO_HOST = {"HOST": "", "QUEEN_HOST": ""}


def _listening(pid: int, port: int) -> set[str]:
    """The addresses `pid` (the `web` supervisor, which owns the listening socket) listens
    on at `port`."""
    return {c.laddr.ip for c in psutil.Process(pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


def test_without_auth_web_listens_on_loopback_only_and_says_so(database_url: str,
                                                                tmp_path: Path) -> None:
    with Served(tmp_path / "web.log", command="web", workers=1,
                env={"DATABASE_URL": database_url, **NO_HOST}) as served:
        assert _listening(served.pid, served.port) == {"127.0.0.1"}
        log = served.log()
    assert "authentication is off, so the broker listens on 127.0.0.1 only" in log
    assert "beyond this machine" not in log


def test_with_auth_on_web_listens_on_every_interface(database_url: str,
                                                     tmp_path: Path) -> None:
    with Served(tmp_path / "web.log", command="web", workers=1,
                env={"DATABASE_URL": database_url, **NO_HOST, **AUTH_ENV}) as served:
        assert _listening(served.pid, served.port) == {"0.0.0.0"}
        log = served.log()
    assert "listens on 127.0.0.1 only" not in log


def test_host_option_wins_over_the_default(database_url: str, tmp_path: Path) -> None:
    served = Served(tmp_path / "web.log", command="web", workers=1,
                    env={"DATABASE_URL": database_url, **NO_HOST, "QUEEN_HOST": "0.0.0.0",
                         "HOST": "127.0.0.1"})
    with served:
        assert _listening(served.pid, served.port) == {"0.0.0.0"}  # QUEEN_HOST over HOST
        assert "beyond this machine" in served.log()  # and it warns


def _embedded_env() -> dict[str, str]:
    """This environment without any database setting: the embedded default."""
    return {k: v for k, v in os.environ.items()
            if k != "DATABASE_URL" and not k.startswith("PG_")}


def _migrate(data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "broker.cli", "migrate", "--data-dir", str(data)],
                          cwd=ROOT, env=_embedded_env(), capture_output=True, text=True,
                          timeout=300, check=False)


def test_migrate_on_a_fresh_data_directory_starts_the_embedded_database_and_stops_it(
        ) -> None:
    with server_data_dir("queen-migrate-") as data:
        first = _migrate(data)
        assert first.returncode == 0, first.stderr
        assert "starting the embedded PostgreSQL" in first.stderr
        assert "applied migration 001_log.sql" in first.stderr
        pg = EmbeddedPostgres(data)
        assert (pg.pgdata / "PG_VERSION").exists()
        assert not (pg.pgdata / "postmaster.pid").exists()  # stopped again, nothing left
        again = _migrate(data)
        assert again.returncode == 0 and "nothing to apply" in again.stderr


def test_migrate_that_cannot_start_the_database_says_what_to_run(tmp_path: Path) -> None:
    (tmp_path / "pg").write_text("a file where the cluster's directory should be")
    done = _migrate(tmp_path)
    assert done.returncode == 1
    assert "could not be started" in done.stderr
    assert "queen-broker postgres --data-dir" in done.stderr
    assert "Traceback" not in done.stderr


def _number(dsn: str, query: str) -> int:
    async def read() -> int:
        conn = await asyncpg.connect(dsn)
        try:
            return int(await conn.fetchval(query))
        finally:
            await conn.close()
    return asyncio.run(read())


def test_serve_sizes_the_embedded_database_for_its_workers_pools(tmp_path: Path) -> None:
    # 2 workers x 200 connections: more than the embedded server's default of 300, which
    # refused the pools' extra connections under load ("too many clients": 503s).
    with server_data_dir("queen-sized-") as data, Served(
            tmp_path / "serve.log", workers=2,
            env={**_embedded_env(), "QUEEN_DATA_DIR": str(data), "DB_POOL_SIZE": "200"}):
        assert (_number(EmbeddedPostgres(data).dsn, "SHOW max_connections")
                == 2 * 200 + CONNECTION_HEADROOM)


def test_serve_warns_when_the_pools_exceed_what_the_database_admits(
        database_url: str, tmp_path: Path) -> None:
    with Served(tmp_path / "serve.log", workers=1,
                env={"DATABASE_URL": database_url, "DB_POOL_SIZE": "1000"}) as served:
        log = served.log()
    admitted = _number(database_url, "SELECT current_setting('max_connections')::int"
                       " - current_setting('superuser_reserved_connections')::int"
                       " - current_setting('reserved_connections')::int")
    assert (f"may open 1000 database connections (WORKERS x DB_POOL_SIZE 1000), more than the "
            f"{admitted} the database admits") in log
