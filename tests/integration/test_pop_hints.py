"""A wake-up's partition hints: the hinted partition is claimed by key, without a scan."""

from __future__ import annotations

import asyncpg
import httpx

from core.engine.pop import PopRequest, pop
from core.storage.database import Database


async def _push(http: httpx.AsyncClient, queue: str, partition: str, n: int = 1) -> None:
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": partition, "payload": {"p": partition, "i": i}}
        for i in range(n)]})
    assert r.status_code == 201


async def _partition_id(db: asyncpg.Connection, queue: str, partition: str) -> int:
    return int(await db.fetchval(
        """SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
            WHERE q.name = $1 AND p.name = $2""", queue, partition))


async def test_a_hinted_partition_is_claimed_first(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    for name in ("a", "b", "c", "d"):
        await _push(http, queue_name, name)
    hinted = await _partition_id(db, queue_name, "c")
    for _ in range(5):  # a scan would start at a random partition; the hint always wins
        result = await pop(core_db, PopRequest(group="g-hint", batch=1, queue=queue_name),
                           hints=[hinted])
        assert [m.partition for m in result.messages()] == ["c"]
        await db.execute("""UPDATE queen.log_consumers SET worker_id = NULL, batch_end = NULL,
                            lease_expires_at = NULL WHERE partition_id = $1""", hinted)


async def test_a_stale_hint_falls_back_to_the_scan(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    await _push(http, queue_name, "only")
    await _push(http, queue_name, "empty-later")
    gone = await _partition_id(db, queue_name, "empty-later")
    taken = await pop(core_db, PopRequest(group="g", batch=10, queue=queue_name,
                                          partition="empty-later", auto_ack=True))
    assert len(taken.messages()) == 1  # the hinted partition has nothing left
    result = await pop(core_db, PopRequest(group="g", batch=10, queue=queue_name),
                       hints=[gone])
    assert [m.partition for m in result.messages()] == ["only"]


async def test_hints_are_ignored_where_a_window_buffer_holds_partitions(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    r = await http.post("/api/v1/configure", json={"queue": queue_name,
                                                    "options": {"windowBuffer": 60}})
    assert r.status_code == 200
    await _push(http, queue_name, "busy")
    hinted = await _partition_id(db, queue_name, "busy")
    result = await pop(core_db, PopRequest(group="g", batch=10, queue=queue_name),
                       hints=[hinted])
    assert result.messages() == []  # written just now: the window buffer still holds it
