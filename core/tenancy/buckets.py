"""Token buckets: a rate with a burst, as Queen's proxy limits requests and messages.

A bucket holds up to `capacity` tokens and gains `rate` per second. Taking `n` succeeds when
`n` are there. A take larger than the whole capacity (a batch bigger than the burst) is let
through when the bucket is full and drives it below zero: the debt is paid back before the
next take, so the long-run rate still holds and no batch size is refused forever.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

MAX_RETRY_AFTER_S = 60  # the longest Retry-After answered (Queen's proxy answers 1..60)


class TokenBucket:
    __slots__ = ("_at", "_clock", "capacity", "rate", "tokens")

    def __init__(self, rate: float, capacity: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.capacity = capacity
        self.tokens = capacity  # a new bucket starts full
        self._clock = clock
        self._at = clock()

    def reshape(self, rate: float, capacity: float) -> None:
        """New limits (a quota or the process's share changed); never hands out tokens."""
        self._refill()
        self.rate, self.capacity = rate, capacity
        self.tokens = min(self.tokens, capacity)

    def take(self, n: float) -> float:
        """Take `n` tokens: 0 when taken, else the seconds until they could be (nothing is
        taken then)."""
        self._refill()
        if self.tokens >= n or (n > self.capacity and self.tokens >= self.capacity):
            self.tokens -= n
            return 0.0
        short = min(n, self.capacity) - self.tokens
        return short / self.rate if self.rate > 0 else float(MAX_RETRY_AFTER_S)

    def _refill(self) -> None:
        now = self._clock()
        self.tokens = min(self.capacity, self.tokens + (now - self._at) * self.rate)
        self._at = now


def retry_after(wait_s: float) -> int:
    """Retry-After for a wait: whole seconds, 1 to MAX_RETRY_AFTER_S."""
    return min(max(math.ceil(wait_s), 1), MAX_RETRY_AFTER_S)
