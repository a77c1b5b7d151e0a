"""The cost cell's arithmetic (loadtest/cost.py): CPU per message from a measured cell,
statements by kind, the same-run ratios between checkouts and consumers, and what each side
of a comparison runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from loadtest import cost


def _cell(broker: float, postgres: float, delivered: int, **extra: Any) -> dict[str, Any]:
    return {"verdict": "ok", "seconds": 10.0, "series": [{"pops": 30, "empty_pops": 10}],
            "gate": {"groups": [{"group": "g1", "delivered": delivered}]},
            "cpu_seconds": {"broker": broker, "postgres": postgres, "generator": 9.0},
            "db": {"commits_per_message": 0.01, "wal_bytes_per_message": 480.0}, **extra}


def test_statements_are_told_apart_by_the_function_they_call() -> None:
    assert cost.statement_kind("SELECT ... FROM queen.append($1::text[])") == "push"
    assert cost.statement_kind(
        "SELECT ... FROM queen.append_partitions((SELECT $1::bigint), $2::text[])") == "push"
    assert cost.statement_kind("SELECT verdict FROM queen.pop_ready($1)") == "pop"
    assert cost.statement_kind("SELECT idx FROM queen.ack($1, $2)") == "ack"
    assert cost.statement_kind("SELECT idx FROM queen.ack_spans($1, $2)") == "ack_whole"
    assert cost.statement_kind("SELECT pg_notify(c, p) FROM unnest($1)") == "notify"
    assert cost.statement_kind("SELECT 1") == "other"


def test_cpu_and_statements_are_divided_by_the_messages_delivered() -> None:
    kinds = {"push": {"calls": 100, "exec_ms": 50.0, "wal_bytes": 4_500_000}}
    out = cost.per_message(_cell(0.8, 0.2, 10_000, phase_cpu_seconds={
        "push": {"broker": 0.5, "postgres": 0.05}, "consume": {"broker": 0.3, "postgres": 0.15}}),
        kinds)
    assert out["us_per_message"] == {"broker": 80.0, "postgres": 20.0, "server": 100.0}
    assert out["push_us_per_message"] == {"broker": 50.0, "postgres": 5.0, "server": 55.0}
    assert out["consume_us_per_message"]["server"] == 45.0
    assert out["messages_per_pop"] == 500.0  # 20 pops that delivered
    assert out["statements_per_message"] == {"push": 0.01}
    assert out["statement_wal_bytes_per_message"] == {"push": 450.0}
    assert out["generator_us_per_message"] == 900.0


def test_a_failed_cell_has_no_figures_per_message() -> None:
    failed = {**_cell(1.0, 1.0, 5), "verdict": "FAILURE"}
    assert "us_per_message" not in cost.per_message(failed, {})


def test_ratios_are_taken_round_by_round_and_against_queen() -> None:
    rounds = [{"this raw": cost.per_message(_cell(0.4, 0.1, 10_000), {}),
               "other raw": cost.per_message(_cell(0.8, 0.2, 10_000), {})},
              {"this raw": cost.per_message(_cell(0.6, 0.1, 10_000), {}),
               "other raw": cost.per_message(_cell(0.8, 0.2, 10_000), {})}]
    summary = cost.summarize(rounds)
    ratio = summary["ratios"]["raw this/other"]["server"]
    assert (ratio["min"], ratio["max"]) == (0.5, 0.7)
    this = summary["variants"]["this raw"]
    assert this["server"]["median"] == 60.0
    assert this["queen_ratio"]["server"] == round(60.0 / cost.QUEEN_US["server"], 2)
    assert cost.QUEEN_US == {"broker": 17.7, "postgres": 5.7, "server": 23.4}


def test_the_other_side_is_another_checkout_or_this_one_with_other_workers(
        tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    cost.add_parser(parser.add_subparsers())

    def sides(*argv: str) -> list[tuple[str, Path | None, int]]:
        args = parser.parse_args(["cost", "--workers", "2", *argv])
        return [(s.name, s.root, s.workers) for s in cost.sides_of(args)]

    assert sides() == [("this", None, 2)]
    assert sides("--compare-workers", "1") == [("this", None, 2), ("other", None, 1)]
    assert sides("--compare-root", str(tmp_path)) == [("this", None, 2),
                                                      ("other", tmp_path.resolve(), 2)]
    assert sides("--compare-root", str(tmp_path), "--compare-workers", "3") == [
        ("this", None, 2), ("other", tmp_path.resolve(), 3)]
