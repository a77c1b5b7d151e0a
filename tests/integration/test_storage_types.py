"""The typed storage boundary: every named statement has one typed call, and the columns of
its answer are the fields of its row type, in order (rows are built by position)."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import asyncpg

import core.storage
from core.storage.statements import QUERIES, Statement


def _bind_every_statement() -> dict[str, Statement]:  # type: ignore[type-arg]
    for module in pkgutil.iter_modules(core.storage.__path__):
        importlib.import_module(f"core.storage.{module.name}")
    return dict(Statement.registry)


def test_every_named_statement_has_exactly_one_typed_call() -> None:
    assert sorted(_bind_every_statement()) == sorted(QUERIES)


async def test_each_row_type_names_the_columns_of_its_statement_in_order(
        db: asyncpg.Connection) -> None:
    mismatched = []
    for name, statement in _bind_every_statement().items():
        if statement.row is None:
            continue
        prepared = await db.prepare(statement.sql)
        columns = [a.name for a in prepared.get_attributes()]
        fields = [f.name for f in dataclasses.fields(statement.row)]
        if columns != fields:
            mismatched.append((name, columns, fields))
    assert mismatched == []
