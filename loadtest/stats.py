"""Latency histograms that merge across processes, and live percentile windows.

Log-spaced buckets 1 % wide from 10 µs to ~100 s: percentiles accurate to 1 % at a fixed
~1.6k ints per histogram, whatever the message count, so workers can ship them to the
parent through a queue cheaply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

_BASE = 1.01
_MIN_MS = 0.01
_LOG_BASE = math.log(_BASE)
_BUCKETS = int(math.log(1e5 / _MIN_MS) / _LOG_BASE) + 2


@dataclass(slots=True)
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * _BUCKETS)
    total: int = 0

    def add(self, ms: float, n: int = 1) -> None:
        i = 0 if ms <= _MIN_MS else min(_BUCKETS - 1, int(math.log(ms / _MIN_MS) / _LOG_BASE) + 1)
        self.counts[i] += n
        self.total += n

    def merge(self, other: Histogram) -> None:
        for i, c in enumerate(other.counts):
            if c:
                self.counts[i] += c
        self.total += other.total

    def percentile(self, q: float) -> float | None:
        """The q-th percentile in ms (upper edge of its bucket); None when empty."""
        if not self.total:
            return None
        rank = max(1, math.ceil(self.total * q / 100))
        seen = 0
        for i, c in enumerate(self.counts):
            seen += c
            if seen >= rank:
                return _MIN_MS * _BASE ** i
        return _MIN_MS * _BASE ** (_BUCKETS - 1)

    def summary(self) -> dict[str, float | int | None]:
        return {"count": self.total, "p50_ms": _round(self.percentile(50)),
                "p99_ms": _round(self.percentile(99))}


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


class RecentP99:
    """The p99 of the last second or so, for the live progress line."""

    def __init__(self) -> None:
        self.hist = Histogram()

    def add(self, ms: float, n: int = 1) -> None:
        self.hist.add(ms, n)

    def take_p99(self) -> float:
        p = self.hist.percentile(99) or 0.0
        self.hist = Histogram()
        return p
