"""`queen-broker serve`: the whole broker as one foreground command.

Starts, in order: the embedded PostgreSQL (only when no database is configured), the schema
migrations, hypercorn with N web workers, and the lease reaper. Stops in reverse order on
Ctrl-C / SIGTERM or when any child dies: web and reaper first (they drain in-flight work),
PostgreSQL last. Children also get a parent-death signal, so killing the supervisor outright
leaves no orphans.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from types import FrameType

from core.db import connect_with_retry
from core.embedded import EmbeddedPostgres, stop_process
from core.migrations import apply_migrations
from core.settings import Settings

log = logging.getLogger("queen.serve")


def web_command(settings: Settings) -> list[str]:
    workers = settings.workers or os.cpu_count() or 1
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return [sys.executable, "-m", "hypercorn", "--worker-class", "uvloop",
            "--workers", str(workers), "--bind", f"{host}:{settings.port}",
            "--graceful-timeout", "10", "broker.asgi:app_from_env()"]


def reaper_command() -> list[str]:
    return [sys.executable, "-m", "core.reaper"]


async def _migrate(settings: Settings, dsn: str) -> None:
    conn = await connect_with_retry(dsn, settings, wait_seconds=30)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()


def serve(settings: Settings, *, with_reaper: bool = True) -> int:
    stop_requested = False

    def request_stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    env = dict(os.environ)
    postgres: subprocess.Popen[bytes] | None = None
    children: list[tuple[str, subprocess.Popen[bytes]]] = []
    exit_code = 0
    try:
        if settings.database_url is None:
            embedded = EmbeddedPostgres(settings.data_dir)
            log.info("starting embedded PostgreSQL in %s", embedded.pgdata)
            postgres = embedded.start()
            env["DATABASE_URL"] = embedded.dsn
        dsn = env.get("DATABASE_URL") or settings.database_url
        assert dsn is not None
        asyncio.run(_migrate(settings, dsn))
        children.append(("web", _spawn(web_command(settings), env)))
        if with_reaper:
            children.append(("reaper", _spawn(reaper_command(), env)))
        log.info("queen broker serving on http://%s:%d", settings.host, settings.port)
        while not stop_requested:
            for name, child in children:
                if child.poll() is not None:
                    log.error("%s exited with code %s; stopping", name, child.returncode)
                    exit_code = 1
                    stop_requested = True
            time.sleep(0.2)
    except Exception as exc:  # noqa: BLE001 - any start-up failure must still stop the children
        log.error("start-up failed: %s", exc)
        exit_code = 1
    finally:
        for name, child in reversed(children):
            stop_process(child, signal.SIGTERM, timeout=20)
        if postgres is not None:
            stop_process(postgres, signal.SIGINT)  # fast shutdown: clients are already gone
        log.info("stopped")
    return exit_code


def _spawn(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, env=env, preexec_fn=terminate_with_parent)  # noqa: PLW1509 - no threads yet


def terminate_with_parent() -> None:
    """Run in a child before exec: SIGTERM it if this process dies, even by SIGKILL."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
