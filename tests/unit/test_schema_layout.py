"""The rules of schema/ (schema/README.md), read from the files: released migrations never
change, migrations define no function or view, function files only create or replace
functions and views and define each one once, and every SQL file is in one of the three
directories."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from core.storage.migrations import function_files, migration_files
from core.storage.statements import SCHEMA_DIR

MANIFEST = SCHEMA_DIR / "migrations" / "frozen.sha256"
_DOLLAR_QUOTED = re.compile(r"\$([A-Za-z_]*)\$.*?\$\1\$", re.DOTALL)
_COMMENT = re.compile(r"--[^\n]*")
_DEFINED = re.compile(r"^CREATE OR REPLACE (FUNCTION|VIEW) (queen\.[a-z_][a-z0-9_]*)\b")


def _frozen() -> dict[str, str]:
    """file name -> SHA-256, from the manifest (`sha256sum` format)."""
    entries = {}
    for line in MANIFEST.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        assert name not in entries, f"{name} is listed twice"
        entries[name] = digest
    return entries


def _statements(path: Path) -> list[str]:
    """The top-level statements of a file, without comments and with every dollar-quoted
    body emptied (so what a function's body says is not read as a statement)."""
    text = _COMMENT.sub("", _DOLLAR_QUOTED.sub("$$ $$", path.read_text()))
    return [" ".join(s.split()) for s in text.split(";") if s.strip()]


def test_no_released_migration_has_changed() -> None:
    changed = [name for name, digest in _frozen().items()
               if not (SCHEMA_DIR / "migrations" / name).exists()
               or hashlib.sha256((SCHEMA_DIR / "migrations" / name).read_bytes()).hexdigest()
               != digest]
    assert changed == [], ("a released migration was edited or removed; write a new "
                           "migration instead (schema/migrations/README.md)")


def test_every_migration_is_in_the_manifest() -> None:
    """A new migration gets its line when it is written: from then on it is checked."""
    assert sorted(_frozen()) == sorted(path.name for _, path in migration_files())


def test_the_frozen_check_sees_a_changed_file(tmp_path: Path) -> None:
    """The check above compares what it should: the bytes of the file."""
    name, digest = next(iter(_frozen().items()))
    text = (SCHEMA_DIR / "migrations" / name).read_bytes()
    assert hashlib.sha256(text).hexdigest() == digest
    assert hashlib.sha256(text + b"\n").hexdigest() != digest


def test_migrations_define_no_function_and_drop_old_ones_only_if_they_exist() -> None:
    found = []
    for _, path in migration_files():
        for statement in _statements(path):
            upper = statement.upper()
            dropped = re.match(r"DROP (FUNCTION|VIEW|PROCEDURE)\b", upper)
            if re.match(r"CREATE (OR REPLACE )?(FUNCTION|PROCEDURE|VIEW)\b", upper) or (
                    dropped and " IF EXISTS " not in f" {upper[:30]} "):
                found.append(f"{path.name}: {statement[:60]}")
    assert found == []


def _arity(statement: str, name_end: int) -> int:
    """How many arguments the function defined by `statement` takes (a view: 0)."""
    rest = statement[name_end:].lstrip()
    if not rest.startswith("("):
        return 0
    depth, commas, body = 0, 0, ""
    for char in rest:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            break
        if depth == 1 and char == ",":
            commas += 1
        body += char
    return commas + 1 if body.strip("( \n") else 0


def test_function_files_only_create_or_replace_functions_each_defined_once() -> None:
    """Each signature once: a second signature of a name (another number of arguments) is
    the one way to keep the previous version's calls working during a rolling upgrade."""
    defined: dict[tuple[str, int], str] = {}
    other = []
    for path in function_files():
        for statement in _statements(path):
            match = _DEFINED.match(statement)
            if match is None:
                other.append(f"{path.name}: {statement[:60]}")
                continue
            signature = (match.group(2), _arity(statement, match.end()))
            if signature in defined:
                other.append(f"{path.name}: {signature} again (first in "
                             f"{defined[signature]})")
            else:
                defined[signature] = path.name
    assert other == []
    assert len(defined) > 20  # the parsing found the functions


def test_every_sql_file_is_a_migration_a_function_file_or_a_queries_file() -> None:
    """A file left beside them (e.g. an old `schema/NNN_*.sql` or `queries_*.sql` brought in
    by a merge) would silently never run."""
    known = ({path for _, path in migration_files()} | set(function_files())
             | set((SCHEMA_DIR / "queries").glob("*.sql")))
    assert sorted(str(p.relative_to(SCHEMA_DIR)) for p in SCHEMA_DIR.rglob("*.sql")
                  if p not in known) == []
