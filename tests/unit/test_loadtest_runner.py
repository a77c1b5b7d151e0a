"""The load tool's bookkeeping: a consumer's result is read even when the consumer exited
before the parent looked, and a stepped cell names the best rate a step sustained without
the ceilings."""

from __future__ import annotations

import queue
import time
from typing import Any

from loadtest import report
from loadtest.cell import summarize
from loadtest.gate import Bitmaps, check
from loadtest.runner import CellOutcome, Shape, await_consumers
from loadtest.stats import Histogram


class _Exited:
    def is_alive(self) -> bool:
        return False


def test_the_result_of_a_consumer_that_already_exited_is_read() -> None:
    results: queue.Queue[Any] = queue.Queue()
    consumed: dict[int, Any] = {0: "first"}
    # The second consumer put its result and exited before the parent looked again.
    results.put(("consumer", 1, "second"))
    ticks: list[None] = []
    await_consumers(results, {}, consumed, [_Exited(), _Exited()],
                    deadline=time.monotonic() + 5, tick=lambda: ticks.append(None))
    assert consumed == {0: "first", 1: "second"}
    assert not ticks  # nobody left to wait for


def _stepped_outcome(lag_growth: list[float]) -> CellOutcome:
    pushed = Bitmaps()
    for seq in range(10):
        pushed.mark(0, seq)
    steps = [{"step": i, "offered": 1000.0 * (i + 1), "lag_growth": g,
              "achieved": 1000.0 * (i + 1), "lag": 0.0, "e2e_p99_live": 10.0}
             for i, g in enumerate(lag_growth)]
    series = [{"t": 3.0 + i, "push_rate": 1000.0 * (i + 1), "deliver_rate": 900.0 * (i + 1),
               "rate": 1000.0 * (i + 1)} for i in range(len(steps))]
    e2e = {i: Histogram() for i in range(len(steps))}
    for hist in e2e.values():
        hist.add(10.0)
    return CellOutcome(pushed, [pushed], 0, {"e2e": e2e[0]}, e2e, series,
                       {"broker": 1.0, "postgres": 1.0, "generator": 0.5}, {}, 10.0,
                       step_log=steps, gates=[check("g1", pushed, pushed, 0)])


def test_a_stepped_cell_reports_its_best_sustained_rate_without_ceilings() -> None:
    shape = Shape(queue="q", groups=("g1",), steps=(1000, 2000, 3000))
    # Step 0 is the warm-up; step 2's backlog grew by more than its offered rate.
    cell = summarize(_stepped_outcome([0.0, 0.0, 5000.0]), shape, "W2", None, None, None, True)
    assert cell["throughput"]["best_ok_deliver_msg_per_s"] == 1800.0
    run = {"run_id": "r", "target": "t", "cells": [cell],
           "corpus": {"messages": 1, "mean_bytes": 1.0, "zstd_ratio": 1.0}}
    assert "best sustained delivery: 1,800.0 msg/s" in report.summary(run)
    none_held = summarize(_stepped_outcome([0.0, 5000.0]), shape, "W2", None, None, None, True)
    assert none_held["throughput"]["best_ok_deliver_msg_per_s"] == 0.0
    run["cells"] = [none_held]
    assert "best sustained delivery: none" in report.summary(run)
