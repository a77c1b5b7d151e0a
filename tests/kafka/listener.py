"""The Kafka listener (`python -m broker.kafka`) as a real process for tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Self

from broker.supervisor import terminate_with_parent
from core.embedded import stop_process
from tests.support import PYTHON, ROOT, TEST_SPOOL_DIR, free_port


class KafkaListener:
    def __init__(self, database_url: str, *, env: dict[str, str] | None = None,
                 port: int | None = None, log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {**os.environ, "DATABASE_URL": database_url, "HOST": "127.0.0.1",
                    "QUEEN_KAFKA_PORT": str(self.port), "LOG_LEVEL": "warning",
                    "FILE_BUFFER_DIR": TEST_SPOOL_DIR,
                    # A cluster of its own (its own group coordinator) unless a test joins
                    # listeners into one.
                    "QUEEN_KAFKA_CLUSTER": f"test-{uuid.uuid4().hex[:8]}", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> Self:
        log = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115
        self.proc = subprocess.Popen([PYTHON, "-m", "broker.kafka"], env=self.env, cwd=ROOT,
                                     start_new_session=True, stdout=log,
                                     stderr=subprocess.STDOUT if log else None,
                                     preexec_fn=terminate_with_parent)  # noqa: PLW1509
        if log is not None:
            log.close()
        self.wait_listening(timeout)
        return self

    def wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Kafka listener exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the Kafka listener did not start listening")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, signal.SIGTERM, timeout=30)
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
