"""The schema, applied at start-up: migrations, then the current definition of every function.

`schema/migrations/NNN_name.sql` are the ordered changes to tables, types and indexes: each is
applied once, in version order, in a transaction of its own, and recorded in
`queen.schema_migrations`. `schema/functions/NN_family.sql` hold the current definition of
every SQL function (CREATE OR REPLACE), one file per family: after the migrations, in name
order, each file whose SHA-256 differs from the one recorded in `queen.schema_functions` is
applied in a transaction of its own. A migration forgets every recorded checksum in its own
transaction, so the function files are all applied again after it (it may have dropped or
re-typed what one defines), also when the process dies in between. schema/README.md says how
to change either.

A session advisory lock makes concurrent start-ups (several web workers, the reaper) safe:
one applies, the others wait and then find nothing to do. A database that recorded a
migration this code has no file for was migrated by newer code: its functions are left as
they are (older code re-applying its own would undo the newer ones).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable

from core.storage import citus
from core.storage.statements import SCHEMA_DIR, Conn, Statement

log = logging.getLogger(__name__)

_MIGRATION_FILE = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
_FUNCTIONS_FILE = re.compile(r"^\d{2}_[a-z0-9_]+\.sql$")
# An arbitrary constant shared by every broker process: "queen" in ASCII.
_ADVISORY_LOCK_KEY = 0x717565656E


@dataclass(frozen=True)
class FunctionsRecord:
    file: str
    checksum: str


@dataclass(frozen=True)
class SchemaChanges:
    """What one `apply_schema` did."""

    migrations: list[int]     # versions applied now
    functions: list[str]      # function files applied now
    unknown: list[int]        # recorded versions without a file here: newer code migrated
    distributed: list[str] = dataclasses.field(default_factory=list)  # placed now (Citus)


_LOCK = Statement[None]("migration_lock")
_UNLOCK = Statement[None]("migration_unlock")
_LEDGER = Statement[None]("migration_ledger")
_APPLIED = Statement[None]("migrations_applied")
_RECORD = Statement[None]("migration_record")
_FUNCTIONS_APPLIED = Statement[FunctionsRecord]("functions_applied", FunctionsRecord)
_FUNCTIONS_RECORD = Statement[None]("functions_record")
_FUNCTIONS_FORGET = Statement[None]("functions_forget")


def migration_files(schema: Traversable = SCHEMA_DIR) -> list[tuple[int, Traversable]]:
    """The migrations of a schema directory, by version."""
    found = []
    for path in (schema / "migrations").iterdir():
        match = _MIGRATION_FILE.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    found.sort(key=lambda entry: (entry[0], entry[1].name))
    versions = [v for v, _ in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a version number in {schema}")
    return found


def function_files(schema: Traversable = SCHEMA_DIR) -> list[Traversable]:
    """The function files of a schema directory, in the order they are applied."""
    directory = schema / "functions"
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if _FUNCTIONS_FILE.match(p.name)),
                  key=lambda p: p.name)


def _has_statements(text: str) -> bool:
    return any(line.strip() and not line.lstrip().startswith("--")
               for line in text.splitlines())


def checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def apply_schema(conn: Conn, schema: Traversable = SCHEMA_DIR) -> SchemaChanges:
    """Apply every migration not yet recorded, then every function file whose text changed."""
    await _LOCK.run(conn, key=_ADVISORY_LOCK_KEY)
    try:
        await _LEDGER.run(conn)
        migrations = await _apply_migrations(conn, schema)
        known = {version for version, _ in migration_files(schema)}
        unknown = sorted(set(await _APPLIED.values(conn)) - known)
        if unknown:
            log.warning("the database records migration(s) %s that this code has no file for: "
                        "newer code migrated it, so its functions are left as they are",
                        unknown)
            return SchemaChanges(migrations, [], unknown)
        functions = await _apply_functions(conn, schema)
        placed = await citus.distribute(conn) if await citus.version(conn) else []
    finally:
        await _UNLOCK.run(conn, key=_ADVISORY_LOCK_KEY)
    return SchemaChanges(migrations, functions, [], placed)


async def _apply_migrations(conn: Conn, schema: Traversable) -> list[int]:
    done = set(await _APPLIED.values(conn))
    applied: list[int] = []
    for version, path in migration_files(schema):
        if version in done:
            continue
        text = path.read_text()
        async with conn.transaction():
            if _has_statements(text):  # a version may only say where its content went
                await conn.execute(text)
            await _RECORD.run(conn, version=version, name=path.name)
            await _FUNCTIONS_FORGET.run(conn)
        log.info("applied migration %s", path.name)
        applied.append(version)
    return applied


async def _apply_functions(conn: Conn, schema: Traversable) -> list[str]:
    recorded = {r.file: r.checksum for r in await _FUNCTIONS_APPLIED.rows(conn)}
    applied: list[str] = []
    for path in function_files(schema):
        text = path.read_text()
        digest = checksum(text)
        if recorded.get(path.name) == digest:
            continue
        async with conn.transaction():
            await conn.execute(text)
            await _FUNCTIONS_RECORD.run(conn, file=path.name, checksum=digest)
        log.info("applied functions %s", path.name)
        applied.append(path.name)
    return applied
