"""Versioned schema migrations, applied at start-up.

Files `schema/NNN_name.sql` are applied in order, each in its own transaction, and recorded in
`queen.schema_migrations`. A session advisory lock makes concurrent start-ups (several web
workers, the reaper) safe: one applies, the others wait and then find nothing to do.
"""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from core.queries import SCHEMA_DIR

log = logging.getLogger(__name__)

_MIGRATION_FILE = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
# An arbitrary constant shared by every broker process: "queen" in ASCII.
_ADVISORY_LOCK_KEY = 0x717565656E


def migration_files(directory: Path = SCHEMA_DIR) -> list[tuple[int, Path]]:
    found = []
    for path in directory.iterdir():
        match = _MIGRATION_FILE.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    found.sort()
    versions = [v for v, _ in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a version number in {directory}")
    return found


async def apply_migrations(conn: asyncpg.Connection, directory: Path = SCHEMA_DIR) -> list[int]:
    """Apply every migration not yet recorded; answer the versions applied now."""
    applied_now: list[int] = []
    await conn.execute("SELECT pg_advisory_lock($1)", _ADVISORY_LOCK_KEY)
    try:
        await conn.execute(
            "CREATE SCHEMA IF NOT EXISTS queen;"
            "CREATE TABLE IF NOT EXISTS queen.schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())")
        done = {r["version"] for r in await conn.fetch(
            "SELECT version FROM queen.schema_migrations")}
        for version, path in migration_files(directory):
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(path.read_text())
                await conn.execute(
                    "INSERT INTO queen.schema_migrations (version, name) VALUES ($1, $2)",
                    version, path.name)
            log.info("applied migration %s", path.name)
            applied_now.append(version)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _ADVISORY_LOCK_KEY)
    return applied_now


def with_database(url: str, database: str) -> str:
    """The same server URL, naming another database."""
    return urlunsplit(urlsplit(url)._replace(path="/" + database))


async def create_database(server_url: str, *, prefix: str, migrate: bool = True) -> str:
    """CREATE DATABASE `<prefix><random>` on the server, schema applied unless told not to;
    answer its URL. For tests and load tests, which want a clean database each."""
    name = prefix + uuid.uuid4().hex[:12]
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
