"""The named-SQL loader."""

from __future__ import annotations

import re
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


def test_parse_derives_the_twin_of_a_statement_with_a_here_line() -> None:
    parsed = queries.parse("-- name: call\n-- what it does\n-- here: (SELECT :route::bigint)\n"
                           "SELECT a FROM queen.f(:route::bigint, :x);\n")
    assert parsed == {"call": "SELECT a FROM queen.f(:route::bigint, :x);",
                      "call_here": "SELECT a FROM queen.f((SELECT :route::bigint), :x);"}
    for sql in ("SELECT queen.f(:x);", "SELECT queen.f(:route::bigint, :route::bigint);"):
        with pytest.raises(ValueError, match="route"):
            queries.parse(f"-- name: call\n-- here: (SELECT :route::bigint)\n{sql}\n")
    with pytest.raises(ValueError, match="call_here is defined twice"):
        queries.parse("-- name: call_here\nSELECT 1;\n"
                      "-- name: call\n-- here: (SELECT :route::bigint)\nSELECT queen.f(:route::bigint, 1);\n")


def test_parse_appends_a_statement_with_an_extends_line_to_the_one_it_names() -> None:
    parsed = queries.parse("-- name: read\n-- rows\nSELECT a FROM t\n ORDER BY a;\n\n"
                           "-- name: lock\n-- the first, locked\n-- extends: read\n"
                           " LIMIT 1\n   FOR UPDATE;\n")
    assert parsed == {"read": "SELECT a FROM t\n ORDER BY a;",
                      "lock": "SELECT a FROM t\n ORDER BY a\nLIMIT 1\n   FOR UPDATE;"}
    for text in ("-- name: lock\n-- extends: read\nLIMIT 1;\n-- name: read\nSELECT 1;\n",
                 "-- name: lock\n-- extends: nothing\nLIMIT 1;\n"):
        with pytest.raises(ValueError, match="'lock' extends"):
            queries.parse(text)


def test_a_part_is_not_loaded_itself_only_in_the_statements_that_extend_it() -> None:
    head = "-- name: head\n-- part\n-- shared\nSELECT a FROM t\n WHERE a > 0\n\n"
    parsed = queries.parse(head + "-- name: some\n-- extends: head\n   AND a < :top;\n\n"
                           "-- name: listed\n-- extends: head\n   AND a = ANY(:ids);\n")
    assert list(parsed) == ["some", "listed"]
    assert parsed["some"] == "SELECT a FROM t\n WHERE a > 0\nAND a < :top;"
    assert parsed["listed"] == "SELECT a FROM t\n WHERE a > 0\nAND a = ANY(:ids);"
    for text, refusal in ((head, "part 'head' is extended by no statement"),
                          (head + "-- name: head\nSELECT 2;\n", "'head' is defined twice")):
        with pytest.raises(ValueError, match=refusal):
            queries.parse(text)


def test_the_ready_scan_and_check_share_the_ready_partitions_head() -> None:
    scan, check = queries.QUERIES["ready_scan"], queries.QUERIES["ready_check"]
    head = "OR p.last_write_at >= s.subscription_from))\n"
    assert "ready_partitions" not in queries.QUERIES
    assert scan.split(head)[0] == check.split(head)[0]
    assert check.split(head)[1] == "AND p.id = ANY(:partition_ids::bigint[]);"


def test_the_dlq_lock_is_the_dlq_read_with_a_row_lock() -> None:
    read, lock = queries.QUERIES["dlq_rows"], queries.QUERIES["dlq_lock"]
    assert lock == f"{read.removesuffix(';')}\nLIMIT 1\n   FOR UPDATE OF d;"


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


def test_named_parameters_become_numbered_in_order_of_first_use() -> None:
    sql, params = queries.positional(
        "SELECT :queue, :lease_id::text, :queue || 'x' FROM t WHERE g = :group")
    assert sql == "SELECT $1, $2::text, $1 || 'x' FROM t WHERE g = $3"
    assert params == ("queue", "lease_id", "group")


def test_a_colon_in_text_a_comment_a_dollar_body_or_a_cast_names_nothing() -> None:
    text = ("SELECT ':a', \"b:c\", x::bigint[], $q$ :d $q$, y -- :e\n"
            "  FROM t WHERE z = :f")
    sql, params = queries.positional(text)
    assert params == ("f",)
    assert sql == text.replace(":f", "$1")


def test_a_statement_that_numbers_a_parameter_is_refused() -> None:
    for sql in ("SELECT $1::text", "SELECT :a, $2"):
        with pytest.raises(ValueError, match="a statement names its parameters; \\$[12] numbers"):
            queries.positional(sql)
    assert queries.positional("SELECT '$1', $q$ $1 $q$ -- $1") == (
        "SELECT '$1', $q$ $1 $q$ -- $1", ())  # a $1 in text, a body or a comment is none


def test_a_named_statement_takes_exactly_its_names() -> None:
    statement = queries.Statement.__new__(queries.Statement)
    statement.name, statement.params = "s", ("queue", "group")
    assert statement._args({"group": "g", "queue": "q"}) == ("q", "g")
    for named in ({"queue": "q"}, {"queue": "q", "group": "g", "x": 1}, {}):
        with pytest.raises(TypeError, match="s takes queue, group parameters"):
            statement._args(named)


def test_a_routed_call_and_its_twin_differ_only_in_giving_the_route_by_a_subquery() -> None:
    from core.storage import reads, writes  # noqa: F401 - they bind the routed statements
    registry = queries.Statement.registry
    twins = [name.removesuffix("_here") for name in registry if name.endswith("_here")]
    assert sorted(twins) == ["ack", "ack_joined", "append_partitions", "append_partitions_joined",
                             "extend_leases", "pop_ready"]
    for name in twins:
        routed, here = registry[name].sql, registry[f"{name}_here"].sql
        call = re.search(r"FROM\s+queen\.[a-z_]+\(", routed)
        assert call is not None, name
        first = routed[call.end():].split(",", 1)[0]  # the route: $1
        assert first == "$1::bigint", name
        assert " ".join(here.split()) == " ".join(routed.replace(
            f"{call.group(0)}{first},", f"{call.group(0)}(SELECT {first}),").split()), name
