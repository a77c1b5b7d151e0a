"""A queue whose windowBuffer or delayedProcessing holds its partitions back: its empty pops
claim none of them (schema/queries/ready.sql, `ready_partitions` and `ready_heads`).
The ready set's seed scan counted such a partition ready; a claim answered it `later` and
the lane deferred it, but a lane holding more partitions than its cap reseeds before it
answers nothing, and each reseed marked them all ready again: every empty pop of such a
queue of 5,000 partitions made 1,875 claim statements and took 2 s. The reseed now gives
them their due, as it gives a lease's."""

from __future__ import annotations

import time

import httpx
import pytest

from core.engine.pop import PopRequest
from core.engine.ready.reader import Reader
from core.engine.ready.ready_set import ReadySet
from core.storage.database import Database
from core.storage.statements import Statement
from tests.support import pop_all_after

pytestmark = pytest.mark.citus

PARTITIONS = 60
CAP = 16  # the lane's cap, far below the queue's partitions: every empty pop reseeds


async def _held_back(http: httpx.AsyncClient, queue: str, options: dict[str, int]) -> None:
    r = await http.post("/api/v1/configure", json={"queue": queue, "options": options})
    assert r.status_code in (200, 201), r.text
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": f"p{n}", "payload": {"n": n}}
        for n in range(PARTITIONS)]})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("option", ["windowBuffer", "delayedProcessing"])
async def test_a_held_back_queue_s_empty_pops_claim_none_of_its_partitions(
        http: httpx.AsyncClient, core_db: Database, queue_name: str, option: str) -> None:
    await _held_back(http, queue_name, {option: 600})
    reader = Reader(core_db, ReadySet(core_db, lambda: 1, lane_cap=CAP))
    request = PopRequest(group="g", batch=1, queue=queue_name)
    for _ in range(4):
        assert (await reader.pop(request)).count == 0  # nothing old enough
    # The first pop's statement registers the group; none claims a partition. Before: 49
    # (every pop walked them all, more than once).
    assert reader.statements == 1


async def test_a_delayed_queue_s_partitions_are_delivered_once_their_delay_is_over(
        http: httpx.AsyncClient, core_db: Database, queue_name: str) -> None:
    """The due the reseed gives is the one the claim would: pops before it find nothing,
    the first pops after it deliver every partition."""
    await _held_back(http, queue_name, {"delayedProcessing": 2})
    pushed = time.monotonic()
    reader = Reader(core_db, ReadySet(core_db, lambda: 1, lane_cap=CAP))
    request = PopRequest(group="g", batch=PARTITIONS, max_partitions=PARTITIONS,
                         queue=queue_name, auto_ack=True)
    assert (await reader.pop(request)).count == 0
    got = await pop_all_after(reader, request, ready_at=pushed + 2.2, expected=PARTITIONS)
    assert got == PARTITIONS


async def test_a_shard_s_dues_are_asked_of_that_shard_alone(
        http: httpx.AsyncClient, core_db: Database, queue_name: str) -> None:
    """On Citus, `ready_heads_on_shard` with the ids of one shard is a statement on that
    shard: without the ids in its segment lookup Citus planned it on all eight, and a
    reseed of a delayed queue would need every node."""
    if not core_db.shards.distributed:
        pytest.skip("one PostgreSQL has no shards")
    await _held_back(http, queue_name, {"delayedProcessing": 600})
    statement = Statement.registry["ready_heads_on_shard"]
    async with core_db.session() as conn:
        ids = await conn.fetch("SELECT d.partition_id FROM queen.partition_directory d"
                               "  JOIN queen.queues q ON q.id = d.queue_id"
                               " WHERE q.name = $1", queue_name)
        one_shard = next(iter(core_db.shards.by_shard([r[0] for r in ids],
                                                      lambda pid: pid).values()))
        args = {"partition_ids": one_shard, "group": "g"}
        plan = "\n".join(r[0] for r in await conn.fetch(
            "EXPLAIN " + statement.sql, *(args[p] for p in statement.params)))
        assert "Task Count: 1\n" in plan, plan
        dues = await statement.rows(conn, **args)
    assert sorted(d.partition_id for d in dues) == sorted(one_shard)
    assert all(590 < d.due_in <= 600 for d in dues)
