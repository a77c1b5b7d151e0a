"""`queen-broker serve` (or `web`) as a real process tree for tests: start, find its children,
read its log, stop it. Only processes it started are ever signalled, by pid."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import ssl
import subprocess
import time
from pathlib import Path
from typing import Self

import httpx
import psutil

from broker.supervisor import terminate_with_parent
from tests.support import PYTHON, ROOT, TEST_SPOOL_DIR, free_port


class Served:
    """`python -m broker.cli <command>` (or `argv`) on a free port, its output kept in
    `log_path`; with `tls` (the client context that trusts its certificate), over https."""

    def __init__(self, log_path: Path, *, command: str = "serve", workers: int = 2,
                 env: dict[str, str] | None = None, argv: list[str] | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.tls = tls
        self.log_path = log_path
        self.argv = argv or [PYTHON, "-m", "broker.cli", command]
        self.workers = workers
        self.env = {**os.environ, "HOST": "127.0.0.1", "PORT": str(self.port),
                    "WORKERS": str(workers), "LOG_LEVEL": "info",
                    "FILE_BUFFER_DIR": TEST_SPOOL_DIR, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> Self:
        """Spawn; with `wait`, until healthy (without: call `wait_healthy`, e.g. after
        spawning several side by side; spawn from the main thread, as the child's
        death signal follows the thread that forked it)."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, cwd=ROOT,
                stdout=log, stderr=log, start_new_session=True,
                preexec_fn=terminate_with_parent)  # noqa: PLW1509 - the test process forks
        if wait:
            self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until /health answers 200 and every web worker has said it is serving."""
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2, verify=self.tls or _tls_context()) as client:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"serve exited with {self.proc.returncode}:\n{self.log()}")
                try:
                    if (client.get(self.url + "/health").status_code == 200
                            and self.log().count("queen.worker: serving on") >= self.workers):
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        raise RuntimeError(f"serve did not become healthy in {timeout} s:\n{self.log()}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def children(self, role: str) -> list[int]:
        """Live direct children by role: "web", "reaper", "postgres" or "kafka"."""
        marks = {"web": "broker.worker", "reaper": "core.reaper", "postgres": "bin/postgres",
                 "kafka": "broker.kafka"}
        pids = []
        try:
            kids = psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return []
        for kid in kids:
            try:
                if kid.status() != psutil.STATUS_ZOMBIE and marks[role] in " ".join(kid.cmdline()):
                    pids.append(kid.pid)
            except psutil.NoSuchProcess:
                continue
        return sorted(pids)

    def tree(self) -> list[int]:
        """Every live process below the supervisor (workers, reaper, PostgreSQL and its
        backends)."""
        try:
            return [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def descendants(self, mark: str) -> list[int]:
        """Live processes anywhere below this one whose command line contains `mark`."""
        pids = []
        for pid in self.tree():
            try:
                if mark in " ".join(psutil.Process(pid).cmdline()):
                    pids.append(pid)
            except psutil.Error:
                continue
        return sorted(pids)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM and wait; answer the exit status (None if it had to be killed)."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is not None:
            return proc.returncode
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def eventually(predicate, timeout: float, interval: float = 0.1):  # type: ignore[no-untyped-def]
    """Poll a plain (non-async) predicate, letting the event loop run in between, until it
    answers something truthy; answer that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {timeout} s")
        await asyncio.sleep(interval)


def gone(pid: int, *, zombie_ok: bool = False) -> bool:
    """The process has exited and been reaped by its parent; with `zombie_ok`, exited is
    enough (an orphan's zombie is the init process's to reap, not ours)."""
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return True
    return status == psutil.STATUS_DEAD or (zombie_ok and status == psutil.STATUS_ZOMBIE)


def fresh_connections(url: str, timeout: float = 30) -> httpx.AsyncClient:
    """A client that opens a connection per request, so requests spread over the workers.
    The TLS context is built once: each new client loading the CA bundle again costs tens of
    milliseconds of CPU, which loops that make a client per request paid on every turn."""
    return httpx.AsyncClient(base_url=url, timeout=timeout, verify=_tls_context(),
                             limits=httpx.Limits(max_keepalive_connections=0))


@functools.cache
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()
