"""Logging for every broker process (web workers, supervisor, reaper): one format."""

from __future__ import annotations

import logging


def configure_logging(level: str) -> None:
    """Log to stderr at `level` (a LOG_LEVEL value), with the process id so lines of several
    workers interleaved by a process manager can be told apart."""
    logging.basicConfig(level=level.upper(),
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
