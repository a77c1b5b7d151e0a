"""Typed calls of the maintenance-switch statements (schema/queries/system.sql)."""

from __future__ import annotations

from dataclasses import dataclass

from core.storage.statements import Conn, Statement


@dataclass(frozen=True, slots=True)
class SystemStateRow:
    push_maintenance: bool
    pop_maintenance: bool
    version: int
    instance_id: str


_READ = Statement("system_state_read", SystemStateRow)


async def read_state(conn: Conn) -> SystemStateRow | None:
    return await _READ.one(conn)


_WRITE = Statement("system_state_write", SystemStateRow)


async def write_state(conn: Conn, *, push: bool | None, pop: bool | None,
                      channel: str) -> SystemStateRow | None:
    """Set the switches given (None keeps one) and notify `channel` at commit."""
    return await _WRITE.one(conn, push=push, pop=pop, channel=channel)
