"""Typed calls of the wake-up notifications and of the LISTEN connection's round trip
(schema/queries/storage.sql)."""

from __future__ import annotations

from collections.abc import Sequence

from core.storage.statements import Conn, Statement

_NOTIFY = Statement[None]("notify_wakeups")


async def notify_wakeups(conn: Conn, *, channel: str, payloads: Sequence[str]) -> None:
    await _NOTIFY.run(conn, channel=channel, payloads=list(payloads))


_NOTIFY_EACH = Statement[None]("notify_each")


async def notify_each(conn: Conn, *, channels: Sequence[str], payloads: Sequence[str]) -> None:
    """One notification per (channel, payload), in this order, in one transaction."""
    await _NOTIFY_EACH.run(conn, channels=list(channels), payloads=list(payloads))


_LISTENER_PROBE = Statement[None]("listener_probe")


async def probe(conn: Conn) -> None:
    """One round trip on the LISTEN connection (core/engine/listener.py: its liveness look,
    and the barrier that brings pending notifications)."""
    await _LISTENER_PROBE.value(conn)
