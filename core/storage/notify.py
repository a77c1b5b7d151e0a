"""Typed call of the wake-up notification (schema/queries/storage.sql)."""

from __future__ import annotations

from collections.abc import Sequence

from core.storage.statements import Conn, Statement

_NOTIFY = Statement[None]("notify_wakeups")


async def notify_wakeups(conn: Conn, *, channel: str, payloads: Sequence[str]) -> None:
    await _NOTIFY.run(conn, channel, list(payloads))
