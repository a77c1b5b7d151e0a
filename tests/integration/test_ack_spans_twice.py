"""queen.ack_spans on its own: a delivery named twice in one call is not applied.

Two ack requests for the same delivery (a client's retry racing its first try) can land in
one flush; both match what the pop delivered. Each of its spans would then pass every check
(they are read before anything is written) and be committed twice, counting its messages
twice in the cursor's total. The function must leave such a call to queen.ack.
"""

from __future__ import annotations

import uuid

import asyncpg

from core.engine.pop import PopRequest
from core.engine.push import PushItem
from core.engine.writes import NewMessage
from core.service import Broker
from core.settings import Settings

SETTINGS = Settings(db_pool_size=2, metrics_flush_ms=600_000)
CALL = ("SELECT idx, applied FROM queen.ack_spans($1::text[], $2::bigint[], $3::text[],"
        " $4::bigint[], $5::bigint[], $6::text[]) ORDER BY idx")


async def test_a_span_named_twice_is_not_applied_and_once_is(
        database_url: str, db: asyncpg.Connection, queue_name: str) -> None:
    async with Broker.open(SETTINGS, dsn=database_url, migrate=False) as broker:
        await broker.push([PushItem(queue_name, "p", NewMessage(uuid.uuid4(), f"t{n}", b"{}"))
                           for n in range(3)])
        popped = await broker.pop(PopRequest(group="g", batch=3, queue=queue_name))
    [claim] = popped.claims
    assert popped.count == 3 and popped.lease_id is not None
    span = ("g", claim.partition_id, popped.lease_id, claim.start, claim.end, "")
    cursor = ("SELECT committed, total_consumed FROM queen.log_consumers"
              " WHERE consumer_group = 'g' AND partition_id = $1")
    before = await db.fetchrow(cursor, claim.partition_id)

    twice = await db.fetch(CALL, *([v, v] for v in span))
    assert [r["applied"] for r in twice] == [False, False]
    assert await db.fetchrow(cursor, claim.partition_id) == before  # nothing written

    once = await db.fetch(CALL, *([v] for v in span))
    assert [r["applied"] for r in once] == [True]
    after = await db.fetchrow(cursor, claim.partition_id)
    assert after["committed"] == claim.end
    assert after["total_consumed"] == before["total_consumed"] + 3
