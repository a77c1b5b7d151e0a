"""Database-side counters for a cell: commits, WAL bytes, segment rows."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg


@dataclass(frozen=True, slots=True)
class PgSnapshot:
    xact_commit: int
    wal_lsn: str
    segments: int


async def snapshot(url: str) -> PgSnapshot:
    conn = await asyncpg.connect(url)
    try:
        # Backends publish their counters when idle or about once a second; clearing the
        # snapshot cache makes this read see the newest published values.
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        commits = await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        lsn = await conn.fetchval("SELECT pg_current_wal_lsn()::text")
        segments = 0
        if await conn.fetchval("SELECT to_regclass('queen.log_segments') IS NOT NULL"):
            segments = await conn.fetchval("SELECT count(*) FROM queen.log_segments")
        return PgSnapshot(int(commits), str(lsn), int(segments))
    finally:
        await conn.close()


async def wal_bytes(url: str, before: str, after: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)::bigint",
                                       after, before))
    finally:
        await conn.close()


async def data_dir(url: str) -> str | None:
    conn = await asyncpg.connect(url)
    try:
        return str(await conn.fetchval("SHOW data_directory"))
    except asyncpg.PostgresError:  # needs superuser or pg_read_all_settings
        return None
    finally:
        await conn.close()
