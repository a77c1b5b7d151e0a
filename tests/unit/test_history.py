"""The arithmetic of the analytics family (core/upkeep/history.py): bucket widths by window,
latency averages and quantile estimates from the histogram counters, process names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.counters import LATENCY_BOUNDS, Counters, bucket_name
from core.upkeep.history import Window, add_up, bucket_minutes, host_and_pid, latency

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("span", "width"), [
    (timedelta(minutes=15), 1), (timedelta(hours=1), 1), (timedelta(hours=2), 5),
    (timedelta(hours=6), 5), (timedelta(hours=7), 15), (timedelta(days=1), 15),
    (timedelta(days=2), 60), (timedelta(days=7), 60), (timedelta(days=30), 360)])
def test_wider_windows_get_wider_buckets(span: timedelta, width: int) -> None:
    assert bucket_minutes(Window(T0, T0 + span)) == width


def test_a_bucket_is_never_narrower_than_asked() -> None:
    assert bucket_minutes(Window(T0, T0 + timedelta(minutes=30)), at_least=5) == 5
    assert bucket_minutes(Window(T0, T0 + timedelta(days=3)), at_least=5) == 60


def _timed(kind: str, seconds: list[float]) -> dict[str, int]:
    counters = Counters()
    for s in seconds:
        counters.request(kind, s)
    return {name: n for (_, name), n in counters.take().items()}


def test_latency_average_and_quantiles_come_from_the_histogram() -> None:
    # 90 requests of 2 ms (bucket 1-2.5 ms) and 10 of 40 ms (bucket 25-50 ms)
    figures = latency(_timed("push", [0.002] * 90 + [0.040] * 10), "push")
    assert figures.count == 100
    assert figures.avg_ms == pytest.approx(0.9 * 2 + 0.1 * 40, abs=0.01)
    # p50: rank 50 of the 90 in (1, 2.5] ms, linearly: 1 + 1.5 * 50/90
    assert figures.quantiles_ms[0.5] == pytest.approx(1 + 1.5 * 50 / 90, abs=0.001)
    # p95: rank 95, the 5th of the 10 in (25, 50] ms
    assert figures.quantiles_ms[0.95] == pytest.approx(25 + 25 * 5 / 10, abs=0.001)
    assert figures.quantiles_ms[0.99] == pytest.approx(25 + 25 * 9 / 10, abs=0.001)


def test_a_request_slower_than_every_bound_counts_at_the_largest_bound() -> None:
    figures = latency(_timed("ack", [120.0]), "ack")
    assert figures.quantiles_ms[0.99] == LATENCY_BOUNDS[-1] * 1000
    assert figures.avg_ms == pytest.approx(120_000)


def test_nothing_timed_is_none_not_zero() -> None:
    figures = latency({"push_requests": 3}, "pop")
    assert (figures.count, figures.avg_ms) == (0, None)
    assert set(figures.quantiles_ms.values()) == {None}


def test_counters_add_up_name_by_name() -> None:
    assert add_up([{"a": 1, bucket_name("pop", 0): 2}, {"a": 4}, {}]) == {
        "a": 5, bucket_name("pop", 0): 2}


def test_process_names_split_into_host_and_pid() -> None:
    assert host_and_pid("vm:1234") == ("vm", 1234)
    assert host_and_pid("fe80::1:77") == ("fe80::1", 77)
    assert host_and_pid("odd") == ("odd", None)
