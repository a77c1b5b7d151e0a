"""Loads named SQL statements from `schema/queries*.sql`.

Each statement sits under a `-- name: <name>` header line, followed by comment lines that
describe it and its `$n` parameters, then the SQL up to the next header.
"""

from __future__ import annotations

import re
from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schema"
_HEADER = re.compile(r"^-- name: *([a-z_][a-z0-9_]*) *$", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    """Split a queries file into {name: sql}; a name may appear only once."""
    queries: dict[str, str] = {}
    parts = _HEADER.split(text)
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        sql = "\n".join(line for line in body.strip().splitlines()
                        if not line.lstrip().startswith("--")).strip()
        if not sql:
            raise ValueError(f"query {name!r} has no SQL")
        queries[name] = sql
    return queries


def load(directory: Path = SCHEMA_DIR) -> dict[str, str]:
    queries: dict[str, str] = {}
    for path in sorted(directory.glob("queries*.sql")):
        for name, sql in parse(path.read_text()).items():
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice ({path.name})")
            queries[name] = sql
    return queries


QUERIES = load()
