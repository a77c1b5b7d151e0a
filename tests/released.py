"""Databases created by a released version of the broker, for the upgrade tests.

Everything that landed on main is released: a database anywhere may have been created by it.
A released version's own code, taken from the repository's history (`git archive`), creates
the schema in a fresh database with its own migrator, as it did where it ran; the code of
this checkout then migrates it. Its migration files need not be in this checkout (the
numbered chain of `schema/NNN_*.sql` is not: it became schema/migrations and
schema/functions), and its function definitions are exactly what it shipped.

The tests therefore need the history: a clone, not an export of the files (without it they
skip, saying so).
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from tests.support import ROOT, create_database

# Releases whose databases this code must upgrade: main before the schema became
# migrations + functions (the numbered chain to version 95), main when this layout was
# written (the chain with versions 94 and 97), main with version 130 (the analytics
# history), the last release before the tenants' version 140, and main with version 140, the
# last release before the Citus layout's version 150. Add later releases to test the upgrade
# from them too.
RELEASES = {"landed-v90": "c0cc51a", "numbered-chain-v95": "8e1d532",
            "numbered-chain-v97": "7e3f2d0", "history-v130": "53d4f30",
            "tenants-v140": "c8a3801"}

# Run by the released code, in its own tree: apply its schema (up to a version, if given).
_CREATE = """
import asyncio, shutil, sys, tempfile
from pathlib import Path
import asyncpg
from core.storage import migrations as m
from core.storage.statements import SCHEMA_DIR

url, up_to = sys.argv[1], int(sys.argv[2])

async def main():
    conn = await asyncpg.connect(url)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if hasattr(m, "apply_schema"):  # schema/migrations + schema/functions
                schema = Path(tmp) / "schema"
                shutil.copytree(SCHEMA_DIR, schema)
                for version, path in m.migration_files(schema):
                    if up_to and version > up_to:
                        path.unlink()
                await m.apply_schema(conn, schema)
            else:  # the numbered chain in schema/
                for version, path in m.migration_files():
                    if not up_to or version <= up_to:
                        shutil.copy(path, tmp)
                await m.apply_migrations(conn, Path(tmp))
    finally:
        await conn.close()

assert Path(m.__file__).is_relative_to(Path.cwd()), m.__file__  # the released code runs
asyncio.run(main())
"""


def released_tree(commit: str) -> Path:
    """The released commit's core/ and schema/, extracted once per machine."""
    dest = Path(tempfile.gettempdir()) / f"queen-released-{commit}"
    if dest.is_dir():
        return dest
    done = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit,
                           "core", "schema"], capture_output=True, check=False)
    if done.returncode != 0:  # an export or a shallow clone: the releases are not here
        pytest.skip(f"the released commit {commit} is not in this checkout's history "
                    f"(git archive: {done.stderr.decode().strip()}); the upgrade tests "
                    "need a clone of the repository with its history")
    staging = Path(tempfile.mkdtemp(prefix=f"queen-released-{commit}-"))
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(staging, filter="data")
        else:  # Python before 3.11.4 (Debian 12 has 3.11.2) has no filters; our own history
            tar.extractall(staging)
    try:
        staging.rename(dest)
    except OSError:  # extracted meanwhile by another test process
        shutil.rmtree(staging)
    return dest


async def create_released_database(server_url: str, commit: str, *,
                                   up_to: int = 0, url: str | None = None) -> str:
    """A fresh database whose schema the released commit's code created (its migrations up
    to `up_to` only, when given); answers its URL. `url`: an empty database made already
    (a Citus one), used instead of a new one on `server_url`."""
    url = url or await create_database(server_url, migrate=False)
    tree = released_tree(commit)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CREATE, url, str(up_to), cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)}, stderr=asyncio.subprocess.PIPE)
    _, stderr = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, stderr.decode()
    return url


async def run_released(commit: str, code: str, *args: str) -> None:
    """Run `code` (Python, given `args` as sys.argv[1:]) with the released commit's core/ on
    its path, in its tree: what that version's own broker did to a database at its version,
    which this code's broker may no longer do (its statements name later tables)."""
    tree = released_tree(commit)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, *args, cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)}, stderr=asyncio.subprocess.PIPE)
    _, stderr = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, stderr.decode()
