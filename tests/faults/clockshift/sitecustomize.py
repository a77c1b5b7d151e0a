"""Shift this process's wall clock by QUEEN_TEST_CLOCK_SKEW seconds (a test hook).

Python imports `sitecustomize` at start-up from the first directory on sys.path that has one,
so a broker process started with this directory on PYTHONPATH (and every worker it spawns)
reads a skewed `time.time()` and `time.time_ns()`. Monotonic clocks are left alone: they
measure intervals, not instants. `datetime.now()` reads the system clock in C and cannot be
shifted from Python without swapping the `datetime` type, which compiled extensions check;
tests/faults/test_database_clock.py therefore also checks that the core reads no wall clock
through `datetime`. Nothing in the broker changes for this.
"""

from __future__ import annotations

import os
import time as _time

_SKEW = float(os.environ.get("QUEEN_TEST_CLOCK_SKEW") or 0)

if _SKEW:
    _real_time, _real_time_ns = _time.time, _time.time_ns
    _time.time = lambda: _real_time() + _SKEW
    _time.time_ns = lambda: _real_time_ns() + int(_SKEW * 1_000_000_000)
