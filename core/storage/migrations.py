"""Versioned schema migrations, applied at start-up.

Files `schema/NNN_name.sql` are applied in order, each in its own transaction, and recorded in
`queen.schema_migrations`. A session advisory lock makes concurrent start-ups (several web
workers, the reaper) safe: one applies, the others wait and then find nothing to do.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from core.storage.statements import SCHEMA_DIR, Conn, Statement

log = logging.getLogger(__name__)

_MIGRATION_FILE = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
# An arbitrary constant shared by every broker process: "queen" in ASCII.
_ADVISORY_LOCK_KEY = 0x717565656E

_LOCK = Statement[None]("migration_lock")
_UNLOCK = Statement[None]("migration_unlock")
_LEDGER = Statement[None]("migration_ledger")
_APPLIED = Statement[None]("migrations_applied")
_RECORD = Statement[None]("migration_record")


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


async def apply_migrations(conn: Conn, directory: Path = SCHEMA_DIR) -> list[int]:
    """Apply every migration not yet recorded; answer the versions applied now."""
    applied_now: list[int] = []
    await _LOCK.run(conn, _ADVISORY_LOCK_KEY)
    try:
        await _LEDGER.run(conn)
        done = set(await _APPLIED.values(conn))
        for version, path in migration_files(directory):
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(path.read_text())
                await _RECORD.run(conn, version, path.name)
            log.info("applied migration %s", path.name)
            applied_now.append(version)
    finally:
        await _UNLOCK.run(conn, _ADVISORY_LOCK_KEY)
    return applied_now
