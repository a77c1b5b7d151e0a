"""Test helpers: a throwaway PostgreSQL, fresh databases, and real broker processes."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

from core.embedded import EmbeddedPostgres, stop_process
from core.migrations import apply_migrations
from core.settings import database_url_from_env

ROOT = Path(__file__).resolve().parent.parent
# Speed settings for the test server only; benchmarks and production keep fsync on.
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                 "max_connections": "400"}


def external_database_url() -> str | None:
    """DATABASE_URL / PG_* from the environment, if the tester pointed at a server."""
    return database_url_from_env(os.environ)


def start_embedded(data_dir: Path, **extra: str) -> tuple[EmbeddedPostgres, subprocess.Popen[bytes]]:
    pg = EmbeddedPostgres(data_dir, settings={**FAST_SETTINGS, **extra})
    return pg, pg.start()


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


async def create_database(server_url: str, *, migrate: bool = True) -> str:
    """A fresh database on the server, migrated; answers its URL."""
    name = "queen_test_" + uuid.uuid4().hex[:12]
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    url = with_database(server_url, name)
    if migrate:
        conn = await asyncpg.connect(url)
        try:
            await apply_migrations(conn)
        finally:
            await conn.close()
    return url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """`hypercorn` serving the broker app (and optionally the reaper) as real processes."""

    def __init__(self, database_url: str, *, workers: int = 2, reaper: bool = False,
                 env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.database_url = database_url
        self.workers = workers
        self.with_reaper = reaper
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "DATABASE_URL": database_url, "HOST": "127.0.0.1",
                    "PORT": str(self.port), "WORKERS": str(workers), "LOG_LEVEL": "warning",
                    **(env or {})}
        self.web: subprocess.Popen[bytes] | None = None
        self.reaper: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        from broker.supervisor import reaper_command, web_command
        from core.settings import Settings

        settings = Settings.from_env(self.env)
        self.web = subprocess.Popen(web_command(settings), env=self.env, cwd=ROOT,
                                    start_new_session=True)
        if self.with_reaper:
            self.reaper = subprocess.Popen(reaper_command(), env=self.env, cwd=ROOT,
                                           start_new_session=True)
        self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.web is not None
            if self.web.poll() is not None:
                raise RuntimeError(f"broker exited with {self.web.returncode}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("broker did not become healthy")

    def stop(self) -> None:
        for proc in (self.reaper, self.web):
            if proc is not None:
                stop_process(proc, signal.SIGTERM, timeout=15)
        self.web = self.reaper = None

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):  # type: ignore[no-untyped-def]
    """Poll an async predicate until it returns a truthy value; answer that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


PYTHON = sys.executable


async def fetch_records(client: httpx.AsyncClient, queue: str, partition: str = "Default",
                        offset: int = 0) -> dict:  # type: ignore[type-arg]
    """Every record of one partition from `offset` via /api/v1/fetch (follows maxBytes pages)."""
    records: list[dict] = []  # type: ignore[type-arg]
    while True:
        r = await client.post("/api/v1/fetch", json={
            "entries": [{"queue": queue, "partition": partition, "offset": offset}]})
        assert r.status_code == 200, r.text
        entry = r.json()["entries"][0]
        records += entry["records"]
        if not entry["records"] or entry.get("error"):
            return {**entry, "records": records}
        offset = entry["records"][-1]["offset"] + 1
        if offset >= entry["highWatermark"]:
            return {**entry, "records": records}


async def queue_counts(conn: asyncpg.Connection, queue: str) -> dict[str, int]:
    """Rows the queue owns, table by table (all zero once it is deleted or never created)."""
    row = await conn.fetchrow(
        """
        WITH q AS (SELECT id FROM queen.queues WHERE name = $1),
             p AS (SELECT id FROM queen.log_partitions WHERE queue_id IN (SELECT id FROM q))
        SELECT (SELECT count(*) FROM q) AS queues,
               (SELECT count(*) FROM p) AS partitions,
               (SELECT count(*) FROM queen.log_segments
                 WHERE partition_id IN (SELECT id FROM p)) AS segments,
               (SELECT count(*) FROM queen.log_txn_index
                 WHERE partition_id IN (SELECT id FROM p)) AS txn_index
        """, queue)
    assert row is not None
    return dict(row)
