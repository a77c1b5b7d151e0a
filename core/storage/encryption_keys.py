"""Typed calls of the key check's statements (schema/queries/encryption.sql)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from core.storage.statements import Conn, Statement


@dataclass(frozen=True, slots=True)
class KeyCheckRow:
    key_id: bytes
    check_value: bytes
    created_at: datetime


_INSERT = Statement[None]("key_check_insert")


async def insert_key_check(conn: Conn, *, key_id: bytes, check_value: bytes) -> None:
    """Store the key check unless one is stored already."""
    await _INSERT.run(conn, key_id=key_id, check_value=check_value)


_READ = Statement("key_check_read", KeyCheckRow)


async def read_key_check(conn: Conn) -> KeyCheckRow | None:
    return await _READ.one(conn)


_ENCRYPTED_QUEUES = Statement[None]("encrypted_queue_names")


async def encrypted_queue_names(conn: Conn, *, limit: int) -> list[str]:
    return [str(n) for n in await _ENCRYPTED_QUEUES.values(conn, limit=limit)]
