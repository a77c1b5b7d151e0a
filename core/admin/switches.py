"""The maintenance switches (wire-protocol §11), shared by every worker of every broker on one
database.

They live in one row of `queen.system_state` (schema/migrations/060_system_state.sql). A change is
written there and announced by NOTIFY on `CHANNEL` in the same commit; each process applies
the announcement at once (the LISTEN connection of its `WakeupHub`), re-reads the row when
that connection is (re)established (announcements may have been missed meanwhile), and
re-reads it every `REREAD_SECONDS` besides, in case a notification is lost. The row's
version orders what a process hears, so an older state never replaces a newer one.

While the database is unreachable, a process keeps the last state it knew.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from core.errors import ServiceError
from core.storage import system as sql
from core.storage.database import Database
from core.waiting import wait_event

log = logging.getLogger(__name__)

CHANNEL = "queen_maintenance"
REREAD_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class SwitchState:
    push: bool = False  # pushes go to the spool
    pop: bool = False  # pops answer 204
    version: int = -1  # -1: never read

    @classmethod
    def of(cls, row: sql.SystemStateRow) -> SwitchState:
        """The switches as the system_state row holds them."""
        return cls(row.push_maintenance, row.pop_maintenance, row.version)


def decode_notification(payload: str) -> SwitchState:
    """`<version>:<push 0|1>:<pop 0|1>`; ValueError for anything else."""
    version, push, pop = payload.split(":")
    if push not in ("0", "1") or pop not in ("0", "1"):
        raise ValueError(payload)
    return SwitchState(push == "1", pop == "1", int(version))


class Switches:
    """This process's view of the switches; `on_change` hears every change it applies."""

    def __init__(self, db: Database, on_change: Callable[[SwitchState], None]) -> None:
        self._db = db
        self._on_change = on_change
        self.state = SwitchState()
        self.instance_id = ""  # names this database's spool directory
        self._reread = asyncio.Event()
        self._stopping = asyncio.Event()

    @property
    def push_paused(self) -> bool:
        return self.state.push

    @property
    def pop_paused(self) -> bool:
        return self.state.pop

    async def load(self) -> None:
        """Read the row (raises a ServiceError when the database cannot answer)."""
        async with self._db.session() as conn:
            row = await sql.read_state(conn)
        if row is not None:
            self.instance_id = row.instance_id
            self._apply(SwitchState.of(row))

    async def set(self, *, push: bool | None = None, pop: bool | None = None) -> SwitchState:
        """Change either switch for every process; answers the state now in force."""
        async with self._db.session() as conn:
            row = await sql.write_state(conn, push=push, pop=pop, channel=CHANNEL)
        if row is not None:
            self._apply(SwitchState.of(row))
        return self.state

    def notified(self, payload: str | None) -> None:
        """A notification on CHANNEL; None: the listener (re)connected, so re-read."""
        if payload is None:
            self._reread.set()
            return
        try:
            self._apply(decode_notification(payload))
        except ValueError:
            log.warning("ignoring malformed maintenance notification %r", payload)

    def _apply(self, state: SwitchState) -> None:
        if state.version < self.state.version:
            return
        old, self.state = self.state, state
        if (old.push, old.pop) != (state.push, state.pop):
            log.info("maintenance: pushes %s, pops %s",
                     "to the spool" if state.push else "to the database",
                     "paused" if state.pop else "served")
            self._on_change(state)

    async def reread_forever(self) -> None:
        """Re-read the row every REREAD_SECONDS, or at once when the listener reconnects,
        until `close`."""
        while True:
            await wait_event(self._reread, REREAD_SECONDS)
            self._reread.clear()
            if self._stopping.is_set():
                return
            with contextlib.suppress(ServiceError):
                await self.load()

    def close(self) -> None:
        self._stopping.set()
        self._reread.set()
