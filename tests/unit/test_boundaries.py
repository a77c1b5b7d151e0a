"""The architecture's seams, read from the source: the HTTP edge talks to the core service
only, and SQL lives in schema/, never in Python strings."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
# Parts of the core service the edge must not reach: the pool, the wake-up hub, the write
# path, a partition cache, and the state fields that used to hold them.
_PARTS = {"pool", "hub", "directory", "pusher", "db", "coalescer", "draining"}
# Core modules below the service: the edge calls `core.service.Broker` and names the core's
# vocabulary through `core.types`, never these (pyproject.toml's import contract says the
# same of core.engine and core.storage).
_BELOW_THE_SERVICE = ("core.storage", "core.engine", "core.upkeep.maintenance", "asyncpg")
_SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|NOTIFY|LISTEN)\b")


def _python_files(*parts: str) -> list[Path]:
    return sorted(p for part in parts for p in (ROOT / part).rglob("*.py"))


def _edge_files() -> list[Path]:
    return _python_files("broker")


def test_no_edge_module_touches_the_parts_of_the_core_service() -> None:
    touched = []
    for path in _edge_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in _PARTS:
                touched.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert touched == []


def test_no_edge_module_imports_what_lies_below_the_core_service() -> None:
    imports = []
    for path in _edge_files():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.startswith(_BELOW_THE_SERVICE):
                    imports.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert imports == []


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def test_no_sql_is_written_in_python_in_core_or_the_storage_ceiling() -> None:
    inline = []
    for path in _python_files("core") + [ROOT / "loadtest" / "ceiling_sql.py"]:
        tree = ast.parse(path.read_text())
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings and _SQL.search(node.value)):
                inline.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value[:40]!r}")
    assert inline == []


def test_the_sql_check_would_see_a_statement() -> None:
    """The check above looks at the right nodes: it finds SQL in code, not in docstrings."""
    tree = ast.parse('"""SELECT in a docstring."""\nq = "SELECT 1"\n')
    docstrings = _docstrings(tree)
    hits = [n for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and id(n) not in docstrings and _SQL.search(str(n.value))]
    assert len(hits) == 1
