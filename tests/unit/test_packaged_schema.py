"""The SQL ships inside the installed package: the code reads it as package data of `core`
(core/storage/statements.py), which in the repository is core/schema, a link to the top-level
schema/; pyproject.toml's package-data puts every SQL file of schema/ into the wheel.
`.ci/wheel-smoke` builds the wheel and runs a broker from it outside the clone."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from core.storage.statements import SCHEMA_DIR, load
from tests.support import ROOT

SCHEMA = ROOT / "schema"


def test_the_code_reads_the_top_level_schema_through_the_package() -> None:
    link = ROOT / "core" / "schema"
    assert link.is_symlink() and link.readlink() == Path("..") / "schema", link
    assert Path(str(SCHEMA_DIR)).resolve() == SCHEMA.resolve()


def test_package_data_takes_every_sql_file_of_schema() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = config["package-data"]["core.schema"]
    shipped = {path for pattern in patterns for path in SCHEMA.glob(pattern)}  # as setuptools
    files = set(SCHEMA.rglob("*.sql"))
    assert files and files - shipped == set()
    assert config["packages"]["find"]["include"] == ["broker*", "core*"]


def test_missing_sql_is_named_at_import(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="the SQL statements are missing: no directory"):
        load(tmp_path / "queries")
