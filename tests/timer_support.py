"""Test helpers for timers: the firer as a real process (`python -m core.timers.firer`),
started, killed and stopped by pid."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Self

from broker.supervisor import terminate_with_parent
from core.embedded import stop_process
from tests.support import PYTHON, ROOT


class FirerProcess:
    def __init__(self, database_url: str, **env: str) -> None:
        self.env = {**os.environ, "DATABASE_URL": database_url, "LOG_LEVEL": "warning",
                    "METRICS_FLUSH_MS": "200", **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        self.proc = subprocess.Popen([PYTHON, "-m", "core.timers.firer"], env=self.env,
                                     cwd=ROOT, start_new_session=True,
                                     preexec_fn=terminate_with_parent)  # noqa: PLW1509
        return self

    def kill(self) -> None:
        """kill -9, now."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, signal.SIGTERM, timeout=15)
            self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

