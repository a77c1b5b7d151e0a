"""Typed call of the depth statement (schema/queries/depth.sql)."""

from __future__ import annotations

from dataclasses import dataclass

from core.storage.statements import Conn, Statement


@dataclass(slots=True)
class DepthRow:
    partition: str
    last_offset: int
    log_start: int
    committed: int | None  # the cursor depth counts from; None: no cursor (-1)


_DEPTH_CURSORS = Statement("depth_cursors", DepthRow)


async def depth_cursors(conn: Conn, *, queue_id: int, group: str | None) -> list[DepthRow]:
    return await _DEPTH_CURSORS.rows(conn, queue_id=queue_id, group=group)
