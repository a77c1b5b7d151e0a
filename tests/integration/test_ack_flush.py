"""Acks coalesced (core/engine/batching/acks.py): concurrent ack requests on one process go to
PostgreSQL as one statement per flush, and each request gets the verdicts it would get
alone: a refused item of one request changes nothing, the other requests of the same flush
apply, and an item that would combine with another request's item on the same cursor waits
for the next flush."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx

from core.engine.ack import AckItem, GroupAck
from core.engine.batching.acks import AckFlusher, ExtendFlusher
from core.storage.database import Database
from tests.support import cursor_row, pop_json, push_items


async def _leased(http: httpx.AsyncClient, queue: str, partition: str,
                  n: int) -> tuple[str, str, list[str]]:
    ids = await push_items(http, queue, list(range(n)), partition=partition, prefix=partition)
    body = await pop_json(http, queue, partition=partition, batch=n, consumerGroup="g")
    assert body is not None and len(body["messages"]) == n
    return body["leaseId"], body["partitionId"], ids


async def test_a_refused_item_changes_nothing_while_other_requests_of_its_flush_apply(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    lease_a, pid_a, ids_a = await _leased(http, queue_name, "A", 2)
    lease_b, pid_b, ids_b = await _leased(http, queue_name, "B", 2)
    lease_c, pid_c, ids_c = await _leased(http, queue_name, "C", 1)
    flusher = AckFlusher(core_db, lambda wakes: None, max_concurrent=1)
    # C goes out at once; A and B gather behind it and share the next flush.
    first = asyncio.ensure_future(flusher.apply(
        [GroupAck("g", AckItem(ids_c[0], pid_c, "completed", lease_c))]))
    await asyncio.sleep(0)
    refused = asyncio.ensure_future(flusher.apply(
        [GroupAck("g", AckItem(ids_a[1], pid_a, "completed", "not-the-lease"))]))
    other = asyncio.ensure_future(flusher.apply(
        [GroupAck("g", AckItem(t, pid_b, "completed", lease_b)) for t in ids_b]))
    done = await asyncio.gather(first, refused, other)
    await flusher.close()
    assert flusher.batcher.flushes == 2
    assert [o.success for o in done[0].outcomes] == [True]
    assert [(o.success, o.error) for o in done[1].outcomes] == [
        (False, "invalid or expired lease")]
    assert [o.success for o in done[2].outcomes] == [True, True]
    a = await cursor_row(db, queue_name, "g", partition="A")
    b = await cursor_row(db, queue_name, "g", partition="B")
    assert a is not None and b is not None
    assert (a["committed"], a["worker_id"]) == (-1, lease_a)  # untouched, still leased
    assert (b["committed"], b["worker_id"]) == (1, None)


async def test_acks_on_one_cursor_in_concurrent_requests_are_applied_one_after_the_other(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    lease, pid, ids = await _leased(http, queue_name, "P", 3)
    lease_q, pid_q, ids_q = await _leased(http, queue_name, "Q", 1)
    flusher = AckFlusher(core_db, lambda wakes: None, max_concurrent=1)
    blocker = asyncio.ensure_future(flusher.apply(
        [GroupAck("g", AckItem(ids_q[0], pid_q, "completed", lease_q))]))
    await asyncio.sleep(0)
    # Both gather behind the blocker. Alone, `failed` on the head releases the lease; the `completed` of the next request
    # then names a lease that is gone. Combined in one statement the two would clamp
    # together instead: they must not share a flush.
    failed = asyncio.ensure_future(flusher.apply(
        [GroupAck("g", AckItem(ids[0], pid, "failed", lease))]))
    completed = asyncio.ensure_future(flusher.apply(
        [GroupAck("g", AckItem(ids[2], pid, "completed", lease))]))
    _, f, c = await asyncio.gather(blocker, failed, completed)
    await flusher.close()
    assert flusher.batcher.flushes == 3
    assert f.outcomes[0].success and f.outcomes[0].lease_released
    assert (c.outcomes[0].success, c.outcomes[0].error) == (False, "invalid or expired lease")
    row = await cursor_row(db, queue_name, "g", partition="P")
    assert row is not None and row["committed"] == -1 and row["worker_id"] is None


async def test_extensions_of_several_leases_share_one_statement(
        http: httpx.AsyncClient, core_db: Database, queue_name: str) -> None:
    lease_a, _, _ = await _leased(http, queue_name, "A", 1)
    lease_b, _, _ = await _leased(http, queue_name, "B", 1)
    flusher = ExtendFlusher(core_db, max_concurrent=1)
    first = asyncio.ensure_future(flusher.extend("no-such-lease", 30))
    await asyncio.sleep(0)
    got = await asyncio.gather(first, flusher.extend(lease_a, 600), flusher.extend(lease_b, 900),
                               flusher.extend(lease_a, 700))
    await flusher.close()
    assert flusher.batcher.flushes == 3  # the second extension of lease_a waits its turn
    assert got[0] == [] and len(got[1]) == 1 and len(got[2]) == 1 and len(got[3]) == 1
    assert (got[2][0] - got[1][0]).total_seconds() > 200
