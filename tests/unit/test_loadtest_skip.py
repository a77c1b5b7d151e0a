"""A load-test cell whose client library is missing says why instead of failing its
gate."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from typing import Any

import pytest

from loadtest import cli, report
from loadtest.runner import Shape


def test_the_official_cell_names_the_missing_client(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    shape = replace(Shape(queue="q"), consumer="official")
    assert cli._cannot_run(shape) is None  # installed here (the test extra has it)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "queen" else real(name, *a))
    reason = cli._cannot_run(shape)
    assert reason is not None and "queen-mq==2.6.0" in reason
    assert cli._cannot_run(replace(shape, consumer="raw")) is None
    run: dict[str, Any] = {
        "run_id": "r", "target": "t", "corpus": {"messages": 1, "mean_bytes": 1.0,
                                                 "zstd_ratio": 1.0},
        "cells": [], "skipped": [{"cell": "W2 official consume()", "reason": reason}]}
    assert "| W2 official consume() | skipped |" in report.table(run)
    assert f"skipped: {reason}" in report.summary(run)
