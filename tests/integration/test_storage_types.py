"""The typed storage boundary: every named statement has one typed call, and the columns of
its answer are the fields of its row type, in order (rows are built by position)."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import asyncpg
import msgspec
import pytest

import core
from core.storage.statements import QUERIES, Statement

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus


def _bind_every_statement() -> dict[str, Statement]:  # type: ignore[type-arg]
    # Every module of core (a few statements are bound outside core.storage: the listener's
    # probe), not only those this test's process happened to import before.
    for module in pkgutil.walk_packages(core.__path__, "core."):
        importlib.import_module(module.name)
    return dict(Statement.registry)


async def _has_citus(db: asyncpg.Connection) -> bool:
    return bool(await db.fetchval("SELECT count(*) FROM pg_extension WHERE extname = 'citus'"))


def test_every_named_statement_has_exactly_one_typed_call() -> None:
    assert sorted(_bind_every_statement()) == sorted(QUERIES)


async def test_each_row_type_names_the_columns_of_its_statement_in_order(
        db: asyncpg.Connection) -> None:
    mismatched = []
    for name, statement in _bind_every_statement().items():
        # citus_* statements read Citus's catalog: prepared where it exists (the Citus run)
        if statement.row is None or (name.startswith("citus_") and not await _has_citus(db)):
            continue
        prepared = await db.prepare(statement.sql)
        columns = [a.name for a in prepared.get_attributes()]
        fields = _field_names(statement.row)
        if columns != fields:
            mismatched.append((name, columns, fields))
    assert mismatched == []


def _field_names(row: type) -> list[str]:
    """A row type's fields in order: a dataclass, or a msgspec Struct (the rows built once
    per message are Structs, built in C)."""
    if isinstance(row, type) and issubclass(row, msgspec.Struct):
        return list(row.__struct_fields__)
    return [f.name for f in dataclasses.fields(row)]
