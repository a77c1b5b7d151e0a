"""Data written before the core service's schema (versions 21-26) stays readable and usable.

A database is brought to version 20 by the released code (tests/released.py) and filled
through that version's own write functions (`queen.ensure_partition`,
`queen.append_segment`) and tables: a queue whose stored options lack most keys, messages
with their old index rows, a dead letter holding its payload. Then this code migrates it,
and the broker of today reads and uses all of it.
"""

from __future__ import annotations

import uuid

import asyncpg

from core import segments
from core.admin.dlq import DlqFilter
from core.engine.ack import AckItem, GroupAck
from core.engine.pop import PopRequest
from core.engine.push import PushItem
from core.engine.writes import NewMessage
from core.service import Broker
from core.settings import Settings
from core.storage.migrations import apply_schema, migration_files
from tests.released import RELEASES, create_released_database, run_released

NUMBERED_CHAIN = RELEASES["numbered-chain-v95"]


async def test_rows_of_version_20_are_migrated_and_used_by_todays_broker(
        pg_server_url: str) -> None:
    url = await create_released_database(pg_server_url, NUMBERED_CHAIN, up_to=20)
    frames = [segments.Frame(uuid.uuid4(), f"old-{i}", b'{"old":%d}' % i) for i in range(3)]
    conn = await asyncpg.connect(url)
    try:
        pid = await conn.fetchval(
            "SELECT partition_id FROM queen.ensure_partition('legacy', 'p', 'legacy', '',"
            " '{\"retryLimit\": 1}'::jsonb)")
        await conn.fetchrow("SELECT * FROM queen.append_segment($1, $2, $3, $4)", pid,
                            [f.transaction_id for f in frames], [f.message_id for f in frames],
                            segments.pack(frames))
        await conn.execute(
            "INSERT INTO queen.log_dlq (partition_id, consumer_group, msg_offset, transaction_id,"
            " message_id, payload, error_message, retry_count, created_at)"
            " VALUES ($1, 'g-old', 9, 'dead-1', $2, '{\"was\":\"dead\"}', 'boom', 3, now())",
            pid, uuid.uuid4())
        changes = await apply_schema(conn)
        assert changes.migrations == [v for v, _ in migration_files() if v > 20]
    finally:
        await conn.close()

    async with Broker.open(Settings(db_pool_size=2), dsn=url, migrate=False) as broker:
        # Options: the stored key kept, every other one filled with its default.
        config = await broker.configure(queue="legacy", namespace=None, task=None, given={},
                                        replace=False)
        assert config.options["retryLimit"] == 1 and config.options["leaseTime"] == 300
        # The migrated index still deduplicates and addresses the old messages.
        [again] = await broker.push([PushItem("legacy", "p", NewMessage(
            uuid.uuid4(), "old-1", b"1"))])
        assert again.verdict is not None and again.verdict.status == "duplicate"
        assert again.verdict.message_id == frames[1].message_id
        popped = await broker.pop(PopRequest(group="g", batch=10, queue="legacy"))
        assert [m.frame.transaction_id for m in popped.messages()] == ["old-0", "old-1", "old-2"]
        result = await broker.ack_batch([
            GroupAck("g", AckItem(f.transaction_id, str(pid), "completed", popped.lease_id))
            for f in frames])
        assert [o.success for o in result.outcomes] == [True, True, True]
        # The old dead letter is read with its own payload.
        page = await broker.dlq.list_rows(DlqFilter(queue="legacy"), limit=10, offset=0)
        [letter], total = page.rows, page.total
        assert total == 1 and letter.payload == b'{"was":"dead"}'
        assert (letter.transaction_id, letter.error_message) == ("dead-1", "boom")


# Run by the released code (tests/released.py `run_released`) on a database at version 90.
_WRITE_AT_90 = """
import asyncio, sys, uuid
from core.engine.push import PushItem
from core.engine.writes import NewMessage
from core.service import Broker
from core.settings import Settings

async def main():
    async with Broker.open(Settings(db_pool_size=2), dsn=sys.argv[1], migrate=False) as broker:
        await broker.configure(queue="repeats", namespace=None, task=None,
                               given={"dedupWindowSeconds": 0}, replace=False)
        for queue, txid in [("repeats", "X"), ("repeats", "Y"), ("repeats", "X"),
                            ("intact", "A"), ("intact", "B"),
                            ("holed", "A"), ("holed", "B"), ("holed", "C")]:
            await broker.push([PushItem(queue, "p", NewMessage(uuid.uuid4(), txid,
                                                               txid.encode()))])

asyncio.run(main())
"""


async def test_version_95_marks_partitions_whose_index_lost_rows_before_it(
        pg_server_url: str) -> None:
    """Rows the reaper pruned before version 95 left no mark: the migration marks every
    partition whose index lacks a retained offset, so an ack there still finds the earliest
    occurrence of a repeated transactionId in the segments; intact partitions get no mark
    (their acks never search)."""
    url = await create_released_database(pg_server_url, NUMBERED_CHAIN, up_to=90)
    # Written by that version's own broker: this code's names tables of later versions.
    await run_released(NUMBERED_CHAIN, _WRITE_AT_90, url)
    conn = await asyncpg.connect(url)
    try:
        pids = dict(await conn.fetch(
            "SELECT q.name, p.id FROM queen.log_partitions p"
            " JOIN queen.queues q ON q.id = p.queue_id"))
        await conn.execute("DELETE FROM queen.log_txn_index WHERE partition_id = $1"
                           " AND msg_offset = 0", pids["repeats"])  # pruned, unmarked
        await conn.execute("DELETE FROM queen.log_txn_index WHERE partition_id = $1"
                           " AND msg_offset = 1", pids["holed"])  # not a prefix
        changes = await apply_schema(conn)
        assert changes.migrations == [v for v, _ in migration_files() if v > 90]
        marks = dict(await conn.fetch("SELECT partition_id, below FROM queen.log_txn_pruned"
                                      " WHERE partition_id = ANY($1::bigint[])",
                                      list(pids.values())))
        # A pruned prefix is marked where it ends, a hole past the last offset.
        assert marks == {pids["repeats"]: 1, pids["holed"]: 3}
    finally:
        await conn.close()
    async with Broker.open(Settings(db_pool_size=2), dsn=url, migrate=False) as broker:
        popped = await broker.pop(PopRequest(group="g", batch=1, queue="repeats"))
        assert [m.frame.payload for m in popped.messages()] == [b"X"]
        [outcome] = (await broker.ack_batch([GroupAck("g", AckItem(
            "X", str(pids["repeats"]), "completed", popped.lease_id))])).outcomes
        assert outcome.success and outcome.lease_released
        popped = await broker.pop(PopRequest(group="g", batch=1, queue="repeats"))
        assert [m.frame.payload for m in popped.messages()] == [b"Y"]  # nothing skipped
