"""Logging for every broker process (web workers, supervisor, reaper): one format."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

REPEAT_SECONDS = 60.0  # how often a failure that goes on is logged again


def configure_logging(level: str) -> None:
    """Log to stderr at `level` (a LOG_LEVEL value), with the process id so lines of several
    workers interleaved by a process manager can be told apart."""
    logging.basicConfig(level=level.upper(),
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")


class RepeatedFailure:
    """One failure that a loop or a hot path may meet many times a second for as long as it
    lasts (out of descriptors, a full disk, a directory it may not read): logged when it
    starts, then at most once every `every` seconds with how many times it recurred, and once
    when it clears. Logging it every time wrote ten lines a second from a 100 ms loop, which
    buries everything else and, on a full disk, fills it further."""

    def __init__(self, logger: logging.Logger, *, every: float = REPEAT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.every = every
        self.clock = clock
        self._logged_at: float | None = None  # None while the failure is not happening
        self._since_logged = 0  # occurrences not logged since the last line
        self._total = 0  # occurrences since it started

    @property
    def failing(self) -> bool:
        return self._logged_at is not None

    def failed(self, level: int, message: str, *args: object) -> None:
        """It happened (again); `message % args` describes this occurrence."""
        now = self.clock()
        self._total += 1
        if self._logged_at is None:
            self.logger.log(level, message, *args)
            self._logged_at = now
            return
        self._since_logged += 1
        if now - self._logged_at >= self.every:
            self.logger.log(level, message + " (%d times in the last %.0f s)", *args,
                            self._since_logged, now - self._logged_at)
            self._logged_at, self._since_logged = now, 0

    def cleared(self, message: str) -> None:
        """It worked: if it had been failing, say once that it stopped (at INFO)."""
        if self._logged_at is None:
            return
        self.logger.info("%s (after failing %d times)", message, self._total)
        self._logged_at, self._since_logged, self._total = None, 0, 0
