"""Small pushes to many partitions share transactions (docs/architecture/request-path.md, the write path)."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx

from tests.support import BrokerProcess


async def test_concurrent_pushes_to_50_partitions_commit_in_fewer_than_50_transactions(
        broker: BrokerProcess, db: asyncpg.Connection, queue_name: str) -> None:
    # One connection per push, all at once, so both workers have many partitions ready.
    async def push(i: int) -> str:
        async with httpx.AsyncClient(base_url=broker.url, timeout=30) as client:
            r = await client.post("/api/v1/push", json={"items": [
                {"queue": queue_name, "partition": f"p{i}", "payload": {"i": i}}]})
            assert r.status_code == 201
            return str(r.json()[0]["status"])

    assert await asyncio.gather(*(push(i) for i in range(50))) == ["queued"] * 50
    rows = await db.fetch(
        """SELECT s.xmin::text AS tx, s.base_offset, s.message_count
             FROM queen.log_segments s JOIN queen.log_partitions p ON p.id = s.partition_id
             JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1""", queue_name)
    assert len(rows) == 50  # still one segment per partition, each at offset 0
    assert {(r["base_offset"], r["message_count"]) for r in rows} == {(0, 1)}
    # Rows written by one transaction share its xmin: fewer transactions than partitions.
    assert len({r["tx"] for r in rows}) < 50
