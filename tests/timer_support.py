"""Test helpers for timers: the firer as a real process (`python -m core.timers.firer`),
started, killed and stopped by pid; a whole-schema snapshot."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Self

import asyncpg

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


async def schema_snapshot(db: asyncpg.Connection) -> dict[str, str]:
    """Digests of every table and sequence of schema `queen`, but the counters and heartbeats
    that web workers write on their own (`stats_*`)."""
    relations = await db.fetch(
        "SELECT c.relname, c.relkind::text AS kind FROM pg_class c JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = 'queen' AND c.relkind IN ('r', 'S') "
        "AND c.relname NOT LIKE 'stats\\_%' ORDER BY c.relname")
    out: dict[str, str] = {}
    for rel in relations:
        name = rel["relname"]
        if rel["kind"] == "S":
            out[name] = str(await db.fetchval(f"SELECT last_value FROM queen.{name}"))
        else:
            out[name] = str(await db.fetchval(
                f"SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, '|' "
                f"ORDER BY t::text)), '') FROM queen.{name} t"))
    return out
