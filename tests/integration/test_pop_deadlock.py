"""Concurrent first-contact pops that create the same cursors in opposite orders.

A pop creates the cursors of partitions its group has not touched yet (INSERT .. ON
CONFLICT) among its candidates, which each process's ready set hands over in its own order.
Two pops that reach the same fresh partitions in opposite orders wait for each
other's insert, and PostgreSQL aborts one of them (40P01). The pop is one statement that
changed nothing when aborted, so it is run again instead of answering 503 (the official
client's consume() loop stops at most errors answered to its pop).
"""

from __future__ import annotations

import asyncio

import asyncpg
import httpx

from core.engine.pop import PopRequest, claim
from core.storage.database import Database

PARTITIONS = 40


async def _one_message_per_partition(http: httpx.AsyncClient, db: asyncpg.Connection,
                                     queue: str) -> list[int]:
    """Push one message to each of PARTITIONS new partitions; answer their ids by name."""
    names = [f"p{i:02d}" for i in range(PARTITIONS)]
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": n, "payload": {"n": n}} for n in names]})
    assert r.status_code == 201
    return [int(i) for i in await db.fetchval(
        """SELECT array_agg(p.id ORDER BY p.name) FROM queen.log_partitions p
             JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1""", queue)]


async def test_pops_creating_cursors_in_opposite_orders_all_succeed(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    ids = await _one_message_per_partition(http, db, queue_name)
    for round_ in range(3):  # a new group each round: every cursor is created again
        request = PopRequest(group=f"g{round_}", batch=1000, max_partitions=PARTITIONS,
                             queue=queue_name, auto_ack=True)
        # The group's first pop stores its subscription (concurrent first pops would queue
        # on that row); it takes p00 only.
        first = await claim(core_db, PopRequest(group=f"g{round_}", batch=1, queue=queue_name,
                                                auto_ack=True), ids[:1], 1)
        assert len(first.result.messages()) == 1
        answers = await asyncio.gather(*(claim(core_db, request, h, PARTITIONS)
                                         for h in (ids, ids[::-1], ids, ids[::-1])))
        # Every message of the group once: the pops split the partitions between them.
        assert sum(len(a.result.messages()) for a in answers) == PARTITIONS - 1


async def _deadlocks(db: asyncpg.Connection) -> int:
    return int(await db.fetchval(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"))


async def test_first_contact_pops_in_opposite_orders_do_not_deadlock_at_all(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    """Cursors are created in partition order (schema/functions/30_pop.sql), so the pops above queue
    behind one another: PostgreSQL aborts none of them (the retry is only a backstop)."""
    ids = await _one_message_per_partition(http, db, queue_name)
    # Statistics reach pg_stat_database within about a second of the aborted statement.
    await asyncio.sleep(1.2)
    before = await _deadlocks(db)
    for round_ in range(3):
        group = f"h{round_}"
        await claim(core_db, PopRequest(group=group, batch=1, queue=queue_name, auto_ack=True),
                    ids[:1], 1)
        request = PopRequest(group=group, batch=1000, max_partitions=PARTITIONS,
                             queue=queue_name, auto_ack=True)
        await asyncio.gather(*(claim(core_db, request, h, PARTITIONS)
                               for h in (ids, ids[::-1], ids, ids[::-1])))
    await asyncio.sleep(1.2)
    assert await _deadlocks(db) == before
