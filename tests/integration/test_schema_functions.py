"""The functions layer of the schema (core/storage/migrations.py, schema/README.md): a function
file is applied when its text changed since it was last applied, every file after a migration,
and none on a database that newer code migrated."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from core.storage.migrations import apply_schema, function_files, migration_files
from core.storage.statements import SCHEMA_DIR
from tests.support import create_database

_KV_ISO = "SELECT pg_get_functiondef('queen.kv_iso(timestamptz)'::regprocedure)"


@pytest.fixture
def schema(tmp_path: Path) -> Path:
    """A copy of this code's schema directory, to change."""
    copy = tmp_path / "schema"
    shutil.copytree(SCHEMA_DIR, copy)
    return copy


@pytest.fixture
async def conn(pg_server_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to a fresh database with this code's schema."""
    connection = await asyncpg.connect(await create_database(pg_server_url))
    try:
        yield connection
    finally:
        await connection.close()


def _mark_kv_iso(schema: Path, mark: str) -> None:
    """Change the text of queen.kv_iso's body (a comment in it) in the schema copy."""
    path = schema / "functions" / "60_kv.sql"
    text = path.read_text()
    assert "AS $$ SELECT to_char(" in text
    path.write_text(text.replace("AS $$ SELECT to_char(", f"AS $$ /* {mark} */ SELECT to_char("))


async def test_applying_the_schema_again_applies_nothing(conn: asyncpg.Connection) -> None:
    changes = await apply_schema(conn)
    assert (changes.migrations, changes.functions, changes.unknown) == ([], [], [])


async def test_a_changed_function_file_is_applied_again_and_only_it(
        conn: asyncpg.Connection, schema: Path) -> None:
    _mark_kv_iso(schema, "changed")
    changes = await apply_schema(conn, schema)
    assert (changes.migrations, changes.functions) == ([], ["60_kv.sql"])
    assert "/* changed */" in await conn.fetchval(_KV_ISO)
    assert (await apply_schema(conn, schema)).functions == []


async def test_a_migration_applies_every_function_file_again(
        conn: asyncpg.Connection, schema: Path) -> None:
    """A migration may drop or re-type what an unchanged function file defines."""
    (schema / "migrations" / "990_drops_a_function.sql").write_text(
        "DROP FUNCTION queen.kv_iso(timestamptz);\n")
    changes = await apply_schema(conn, schema)
    assert changes.migrations == [990]
    assert changes.functions == [path.name for path in function_files(schema)]
    assert await conn.fetchval(_KV_ISO) is not None


async def test_a_migration_whose_functions_did_not_follow_applies_them_at_the_next_start(
        conn: asyncpg.Connection, schema: Path) -> None:
    """The migration forgets the recorded checksums in its own transaction: a process that
    dies between a migration and the function files leaves them to the next one."""
    (schema / "migrations" / "990_drops_a_function.sql").write_text(
        "DROP FUNCTION queen.kv_iso(timestamptz);\n")
    broken = schema / "functions" / "15_broken.sql"
    broken.write_text("CREATE OR REPLACE FUNCTION queen.broken() RETURNS int\n"
                      "LANGUAGE sql AS $$ SELECT no_such_column FROM queen.queues $$;\n")
    with pytest.raises(asyncpg.UndefinedColumnError):
        await apply_schema(conn, schema)
    assert await conn.fetchval("SELECT to_regprocedure('queen.kv_iso(timestamptz)')") is None
    broken.unlink()
    changes = await apply_schema(conn, schema)
    assert changes.migrations == []
    assert "60_kv.sql" in changes.functions
    assert await conn.fetchval(_KV_ISO) is not None


async def test_a_database_that_newer_code_migrated_keeps_its_functions(
        conn: asyncpg.Connection, schema: Path) -> None:
    """Older code starting after newer code must not put its own definitions back."""
    await conn.execute("INSERT INTO queen.schema_migrations (version, name)"
                       " VALUES (991, '991_from_newer_code.sql')")
    _mark_kv_iso(schema, "older code")
    changes = await apply_schema(conn, schema)
    assert (changes.migrations, changes.functions, changes.unknown) == ([], [], [991])
    assert "/* older code */" not in await conn.fetchval(_KV_ISO)


async def test_concurrent_start_ups_apply_the_schema_once(pg_server_url: str) -> None:
    """Web workers and the reaper start together: one applies, the others find it done."""
    url = await create_database(pg_server_url, migrate=False)
    conns = [await asyncpg.connect(url) for _ in range(3)]
    try:
        results = await asyncio.gather(*(apply_schema(c) for c in conns))
    finally:
        for c in conns:
            await c.close()
    assert sorted(len(r.migrations) for r in results) == [0, 0, len(migration_files())]
    assert sorted(len(r.functions) for r in results) == [0, 0, len(function_files())]
