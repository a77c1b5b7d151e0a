"""The named-SQL loader."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.storage import statements as queries


def test_parse_splits_statements_by_header_and_drops_comment_lines() -> None:
    text = """-- file comment before any header is ignored
-- name: first_one
-- Describe it.
-- $1 something
SELECT 1
  FROM t;   -- trailing comments stay inside the SQL line

-- name: second
-- Another.
UPDATE t SET x = $1;
"""
    parsed = queries.parse(text)
    assert list(parsed) == ["first_one", "second"]
    assert parsed["first_one"] == "SELECT 1\n  FROM t;   -- trailing comments stay inside the SQL line"
    assert parsed["second"] == "UPDATE t SET x = $1;"


def test_parse_rejects_a_name_defined_twice() -> None:
    with pytest.raises(ValueError, match="'dup' is defined twice"):
        queries.parse("-- name: dup\nSELECT 1;\n-- name: dup\nSELECT 2;\n")


def test_parse_rejects_a_statement_without_sql() -> None:
    with pytest.raises(ValueError, match="'empty' has no SQL"):
        queries.parse("-- name: empty\n-- only a comment\n\n-- name: ok\nSELECT 1;\n")


def test_load_rejects_a_name_defined_in_two_files(tmp_path: Path) -> None:
    (tmp_path / "a.sql").write_text("-- name: shared\nSELECT 1;\n")
    (tmp_path / "b.sql").write_text("-- name: shared\nSELECT 2;\n")
    with pytest.raises(ValueError, match=r"'shared' is defined twice \(b.sql\)"):
        queries.load(tmp_path)


def test_load_reads_only_sql_files(tmp_path: Path) -> None:
    (tmp_path / "x.sql").write_text("-- name: x\nSELECT 1;\n")
    (tmp_path / "README.md").write_text("-- name: y\nSELECT 2;\n")
    assert queries.load(tmp_path) == {"x": "SELECT 1;"}


def test_the_shipped_statements_of_the_write_path_are_loaded() -> None:
    for name in ("partition_ids", "append_partitions", "segments_at", "lock_queue",
                 "insert_queue", "update_queue", "delete_queue_row", "delete_partition_data",
                 "fetch_head", "fetch_segments"):
        assert queries.QUERIES[name].strip(), name
    assert "queen.append_partitions(" in queries.QUERIES["append_partitions"]
