"""pgmq peer: the SQL shipped in PyPI's `pgmq` wheel, installed into our own PostgreSQL.

The wheel (`pip install pgmq`) carries `pgmq/sql/pgmq.sql` (the extension's SQL, installable
without the server extension), which we run into a fresh database on the same durable server
the broker used. Push = `pgmq.send_batch`, pop = `pgmq.read_with_poll` (a server-side long
poll) of up to `batch` under a visibility timeout, ack = one `pgmq.delete` of the batch's ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.resources import files
from typing import Any

import asyncpg

QUEUE = "loadtest_w2"


async def install_into(dsn: str) -> str:
    """Run the wheel's SQL and create the queue; answer the pgmq version pinned by it."""
    sql = files("pgmq").joinpath("sql", "pgmq.sql").read_text()
    version = files("pgmq").joinpath("sql", "VERSION").read_text().strip().splitlines()[-1]
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
        await conn.execute("SELECT pgmq.create($1)", QUEUE)
    finally:
        await conn.close()
    return version


class _Pgmq:
    def __init__(self, dsn: str, role: str) -> None:
        self.dsn = dsn
        self.conn: asyncpg.Connection | None = None

    async def open(self) -> None:
        self.conn = await asyncpg.connect(self.dsn)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def push(self, items: Sequence[tuple[str, bytes]]) -> bool:
        assert self.conn is not None
        await self.conn.execute("SELECT pgmq.send_batch($1, $2::text[]::jsonb[])", QUEUE,
                                [body.decode() for _, body in items])
        return True

    async def take(self, limit: int, wait_s: float) -> tuple[list[bytes], Any]:
        assert self.conn is not None
        rows = await self.conn.fetch(
            "SELECT msg_id, message::text AS m FROM pgmq.read_with_poll($1, 60, $2, $3, 10)",
            QUEUE, limit, max(1, int(wait_s)))
        return [r["m"].encode() for r in rows], [r["msg_id"] for r in rows]

    async def ack(self, handle: Any) -> None:
        assert self.conn is not None
        await self.conn.execute("SELECT pgmq.delete($1, $2::bigint[])", QUEUE, handle)


def make_client(dsn: str, role: str) -> _Pgmq:
    return _Pgmq(dsn, role)
