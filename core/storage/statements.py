"""Named SQL statements from `schema/queries/*.sql`, each with the row type it answers.

Each statement sits under a `-- name: <name>` header line, followed by comment lines that
describe it, then the SQL up to the next header. Its parameters are named in the SQL
(`:queue`, `:lease_id::text`), and its Python call passes them by keyword: the loader turns
the names into asyncpg's `$1..$n` once, at load, in the order they first appear
(`positional`). A statement that numbers its parameters (`$1`) is refused at load.

A `Statement` binds a statement to the dataclass its rows are read into: columns map to
fields by position, in the order the dataclass declares them
(tests/integration/test_storage_types.py prepares every statement and checks the names), so
no `asyncpg.Record` leaves the storage package; driver errors become core errors here
(`core/storage/errors.py`). A `Routed` statement calls a function Citus delegates by its
shard, and is bound with its twin that runs where it is received: a statement whose
description has a `-- here: <expression>` line is loaded with that twin, `<name>_here`, the
same SQL with the expression in place of its `:route::bigint` (so each such call is written
once; the expression itself is SQL, and stays in the queries file). A statement whose
description has a `-- extends: <name>` line is that earlier statement of its file (without
its closing `;`) followed by its own lines: a locked first row of a read is written as the
read and `LIMIT 1 FOR UPDATE`, not as a second copy of the read. A block whose description
has a `-- part` line is no statement of its own, only the head that later statements of its
file extend: two statements that differ in their last conditions share their head this way
(the part is not loaded, and one that no statement extends is refused).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any, ClassVar, Generic, TypeVar

import asyncpg

from core.storage.errors import lost_worker, storage_errors

log = logging.getLogger(__name__)

# The SQL is package data of `core`, read through importlib.resources so that an installed
# wheel reads its own copy. In the repository, core/schema is a symbolic link to the top-level
# schema/ folder: an editable install and `python -m` from the checkout read the same files.
SCHEMA_DIR: Traversable = files("core") / "schema"
QUERIES_DIR = SCHEMA_DIR / "queries"
_HEADER = re.compile(r"^-- name: *([a-z_][a-z0-9_]*) *$", re.MULTILINE)
# A description line giving the route of a routed statement's twin (`Routed`), and the
# argument of the routed statement it replaces.
_HERE = re.compile(r"^-- here: *(.+?) *$", re.MULTILINE)
_ROUTE = ":route::bigint"
# A description line naming the earlier statement (or part) this one continues.
_EXTENDS = re.compile(r"^-- extends: *([a-z_][a-z0-9_]*) *$", re.MULTILINE)
# A description line making its block a part: extended by later statements, never run alone.
_PART = re.compile(r"^-- part *$", re.MULTILINE)
# What the parameter scan steps over whole: quoted text and identifiers, dollar-quoted
# bodies and comments (a colon in them names nothing), and `::` casts; then `:name`, and `$n`
# (refused).
_SQL_TOKEN = re.compile(r"""
      '(?:[^']|'')*'                 # a string
    | "(?:[^"]|"")*"                 # a quoted identifier
    | (\$[A-Za-z_]*\$)[\s\S]*?\1     # a dollar-quoted body
    | --[^\n]*                       # a comment to the end of its line
    | ::                             # a cast
    | :(?P<name>[a-z_][a-z0-9_]*)    # a named parameter
    | (?P<number>\$[0-9]+)           # a numbered one
""", re.VERBOSE)

Conn = asyncpg.Connection  # what storage functions run on; from Database.session()
R = TypeVar("R")
T = TypeVar("T")


def parse(text: str) -> dict[str, str]:
    """Split a queries file into {name: sql}, with `<name>_here` for a statement that has a
    `-- here:` line, and a statement with an `-- extends:` line after the SQL (of a statement
    or a `-- part`) it extends; a name may appear only once."""
    queries: dict[str, str] = {}
    heads: dict[str, str] = {}  # the parts, by name
    unextended: set[str] = set()
    blocks = _HEADER.split(text)
    for name, body in zip(blocks[1::2], blocks[2::2]):
        if name in queries or name in heads:
            raise ValueError(f"query {name!r} is defined twice")
        sql = "\n".join(line for line in body.strip().splitlines()
                        if not line.lstrip().startswith("--")).strip()
        if not sql:
            raise ValueError(f"query {name!r} has no SQL")
        extends = _EXTENDS.search(body)
        if extends is not None:
            base = queries.get(extends.group(1), heads.get(extends.group(1)))
            if base is None:
                raise ValueError(f"query {name!r} extends {extends.group(1)!r}, "
                                 "which its file does not define before it")
            unextended.discard(extends.group(1))
            sql = f"{base.removesuffix(';').rstrip()}\n{sql}"
        if _PART.search(body) is not None:
            heads[name] = sql
            unextended.add(name)
            continue
        queries[name] = sql
        here = _HERE.search(body)
        if here is not None:
            if sql.count(_ROUTE) != 1:
                raise ValueError(f"query {name!r} has a twin but not one {_ROUTE} to replace")
            if f"{name}_here" in queries:
                raise ValueError(f"query {name}_here is defined twice")
            queries[f"{name}_here"] = sql.replace(_ROUTE, here.group(1))
    if unextended:
        raise ValueError(f"part {min(unextended)!r} is extended by no statement")
    return queries


def positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """The statement as asyncpg takes it, and its parameter names in `$n` order: each `:name`
    becomes `$n`, n counting distinct names as they first appear (a name used twice is one
    parameter). A statement that numbers a parameter itself (`$1`) is refused: a call passes
    its parameters by name."""
    names: dict[str, int] = {}

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name is None:
            if match.group("number") is not None:
                raise ValueError(f"a statement names its parameters; {match.group(0)} numbers one")
            return match.group(0)
        return f"${names.setdefault(name, len(names) + 1)}"

    return _SQL_TOKEN.sub(replace, sql), tuple(names)


def load(directory: Traversable = QUERIES_DIR) -> dict[str, str]:
    """Every statement of the directory's .sql files; a name may appear only once."""
    if not directory.is_dir():
        raise RuntimeError(f"the SQL statements are missing: no directory {directory} "
                           "(a checkout needs the core/schema link, a wheel its package data)")
    queries: dict[str, str] = {}
    for path in sorted((p for p in directory.iterdir() if p.name.endswith(".sql")),
                       key=lambda p: p.name):
        for name, sql in parse(path.read_text()).items():
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice ({path.name})")
            queries[name] = sql
    return queries


QUERIES = load()


class Statement(Generic[R]):
    """One named statement; `row` is the dataclass a row of its answer becomes (None for a
    statement read as a single value or a status). Its calls take the parameters by name
    (`rows(conn, queue=..., group=...)`)."""

    registry: ClassVar[dict[str, Statement[Any]]] = {}

    def __init__(self, name: str, row: type[R] | None = None) -> None:
        if name in Statement.registry:
            raise ValueError(f"statement {name!r} is bound twice")
        self.name = name
        self.sql, self.params = positional(QUERIES[name])
        self.row = row
        Statement.registry[name] = self

    def _args(self, named: dict[str, Any]) -> tuple[Any, ...]:
        if named.keys() != set(self.params):
            raise TypeError(f"{self.name} takes {', '.join(self.params) or 'no'} parameters; "
                            f"given {', '.join(named) or 'none'}")
        return tuple(named[param] for param in self.params)

    async def _sent(self, conn: Conn, call: Callable[..., Awaitable[T]],
                    named: dict[str, Any]) -> T:
        """`call(sql, *args)` (a method of `conn`), sent a second time when Citus failed it on
        a dead cached connection to a worker (`errors.lost_worker`: a worker restarted since
        this backend last used it; each backend fails so once per restart). Only a statement
        that was its own transaction is: it rolled back whole, while a statement inside a
        transaction left that transaction aborted (`Database.transaction` then drops the
        connection: core/storage/database.py)."""
        args = self._args(named)
        with storage_errors():
            try:
                return await call(self.sql, *args)
            except asyncpg.PostgresError as exc:
                if not lost_worker(exc) or conn.is_in_transaction():
                    raise
                log.info("%s: %s; sending it again", self.name, exc)
            return await call(self.sql, *args)

    async def rows(self, conn: Conn, **named: Any) -> list[R]:
        make = self.row
        assert make is not None, f"{self.name} has no row type"
        records = await self._sent(conn, conn.fetch, named)
        return [make(*record) for record in records]

    async def one(self, conn: Conn, **named: Any) -> R | None:
        make = self.row
        assert make is not None, f"{self.name} has no row type"
        record = await self._sent(conn, conn.fetchrow, named)
        return None if record is None else make(*record)

    async def single(self, conn: Conn, **named: Any) -> R:
        """The row of a statement that answers exactly one (an aggregate, a function's
        result); no row is a bug of the statement."""
        row = await self.one(conn, **named)
        assert row is not None, f"{self.name} answered no row"
        return row

    async def value(self, conn: Conn, **named: Any) -> Any:
        """The first column of the first row (None when there is no row)."""
        return await self._sent(conn, conn.fetchval, named)

    async def values(self, conn: Conn, **named: Any) -> list[Any]:
        """The first column of every row."""
        records = await self._sent(conn, conn.fetch, named)
        return [record[0] for record in records]

    async def run(self, conn: Conn, **named: Any) -> int:
        """Execute; answer the number of rows the command affected (0 when it says none)."""
        status = await self._sent(conn, conn.execute, named)
        last = status.rsplit(" ", 1)[-1]
        return int(last) if last.isdigit() else 0


class Routed(Generic[R]):
    """A call of a function Citus delegates by its first argument, `route` (a number of the
    shard every row it touches lives on, core/storage/shards.py), bound with its twin
    `<name>_here`, which runs where it is received; `on(route)` picks one.

    Citus sends a call of a delegated function to the node of its first argument's shard,
    for a null too, whatever the rest of the statement. The twin gives the route by a
    subquery, which is no constant Citus can hash, so the call stays where it is received:
    on one PostgreSQL (route None), or for a call over several shards, which then needs no
    other node (a call without a route on a cluster with a worker down still runs on the
    others). The two statements differ in that alone: the loader derives the twin from the
    statement's `-- here:` line (`parse`; tests/unit/test_queries.py checks)."""

    def __init__(self, name: str, row: type[R]) -> None:
        self.routed = Statement(name, row)
        self.here = Statement(f"{name}_here", row)

    def on(self, route: int | None) -> Statement[R]:
        """The statement sent to the route's shard, or the twin for None."""
        return self.here if route is None else self.routed
