"""A fetch reads from PostgreSQL only the segments its byte budget can use
(schema/queries/read.sql, fetch_segments): the Kafka listener's Fetch and the HTTP fetch
share it. Before, every fetch read up to 64 segments of the partition whatever its budget:
with large segments, far more than the answer could carry."""

from __future__ import annotations

import base64
import os

import asyncpg
import httpx

from core.storage import reads


async def _segments_of(http: httpx.AsyncClient, db: asyncpg.Connection,
                       queue: str) -> tuple[int, list[int]]:
    """Four pushes of 20 messages of 12 KB (barely compressible) to one partition: its id,
    and the stored size of each of its four segments, in offset order."""
    for push in range(4):
        payloads = [base64.b64encode(os.urandom(9_000)).decode() for _ in range(20)]
        answer = await http.post("/api/v1/push", json={"items": [
            {"queue": queue, "partition": "p", "payload": {"blob": blob},
             "transactionId": f"{push}-{n}"} for n, blob in enumerate(payloads)]})
        assert answer.status_code == 201, answer.text
    partition_id = await db.fetchval(
        "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id"
        " WHERE q.name = $1 AND p.name = 'p'", queue)
    sizes = [size for (size,) in await db.fetch(
        "SELECT octet_length(blob) FROM queen.log_segments WHERE partition_id = $1"
        " ORDER BY base_offset", partition_id)]
    assert len(sizes) == 4, sizes
    return partition_id, sizes


async def test_a_fetch_reads_only_the_segments_its_budget_can_use(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    partition_id, sizes = await _segments_of(http, db, queue_name)

    async def kept(max_bytes: int) -> int:
        rows = await reads.fetch_segments(db, partition_id=partition_id, offset=0, limit=64,
                                          max_bytes=max_bytes)
        return len(rows)

    assert await kept(1) == 1  # the first segment, always: a fetch makes progress
    assert await kept(sizes[0]) == 1
    assert await kept(sizes[0] + 1) == 2
    assert await kept(sizes[0] + sizes[1] + 1) == 3
    assert await kept(2**31 - 1) == 4
