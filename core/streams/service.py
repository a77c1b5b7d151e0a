"""The streams service: register queries, read their state, commit cycles (§18).

A cycle is one statement (`queen.stream_cycle`, schema/functions/50_streams.sql), so it
commits in one round trip when its connection is idle: the advisory lock of (query,
partition), the lease check, the sink pushes (`queen.append`, the write path of `/push`), the
state ops and the ack. When the sink pushes need more than one statement (a stored duplicate,
whose message id is read from its segment, or an encryption guess that was wrong) the
statement writes nothing and the cycle runs again in a transaction: the same statement without
the pushes, then the pushes through `core.engine.writes.append`.

Sink pushes are refused while pushes are in maintenance (a cycle cannot go to the spool:
its pushes and its ack commit together or not at all); a cycle without pushes still runs.
Wake-ups are announced after the commit, like a push's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

from core import options
from core.counters import COUNTERS
from core.engine import writes
from core.engine.ack import partition_id_of
from core.engine.directory import PartitionName
from core.engine.wakeup import Publish, Wake
from core.errors import CapacityExceeded, PayloadTooLarge
from core.ids import uuid7
from core.storage import streams as sql
from core.storage.database import Database
from core.streams.cycle import Cycle, CycleResult, SinkResult, derived_transaction_ids
from core.tenancy.service import Tenants


class _Refused(Exception):
    def __init__(self, row: sql.CycleRow) -> None:
        super().__init__(row.error)
        self.row = row


def query_uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


class Streams:
    def __init__(self, db: Database, publish: Publish,
                 require_direct_writes: Callable[[], None], tenants: Tenants, *,
                 state_max_bytes: int) -> None:
        self._db = db
        self._state_max_bytes = state_max_bytes  # of one state read (QUEEN_LIST_MAX_BYTES)
        self._publish = publish
        self._require_direct_writes = require_direct_writes
        self._tenants = tenants  # quotas: a cycle's sink pushes are the tenant's writes

    async def register(self, *, name: str, source_queue: str, sink_queue: str | None,
                       config_hash: str, reset: bool, tenant: str = "") -> sql.RegisterRow:
        async with self._db.session() as conn:
            return await sql.register(conn, tenant=tenant, name=name,
                                      source_queue=source_queue, sink_queue=sink_queue,
                                      config_hash=config_hash, reset=reset)

    async def state_get(self, *, query_id: str, partition_id: str, keys: Sequence[str],
                        key_prefix: str, ripe_at_or_before: int | None,
                        tenant: str = "") -> list[sql.StateRow]:
        """The rows of (query, partition) in key byte order; unknown ids (and another
        tenant's query) have none. PayloadTooLarge when their keys and values pass the byte
        bound: the read has no pages, and part of a state is not a state (the runtime takes
        a key left out for a key without state)."""
        qid, pid = query_uuid(query_id), partition_id_of(partition_id)
        if qid is None or pid is None:
            return []
        async with self._db.session() as conn:
            rows = await sql.state_get(conn, tenant=tenant, query_id=qid, partition_id=pid,
                                       keys=keys, key_prefix=key_prefix,
                                       ripe_at_or_before=ripe_at_or_before,
                                       max_bytes=self._state_max_bytes)
        if rows and len(rows) < rows[0].matched:
            raise PayloadTooLarge(
                f"the {rows[0].matched} state rows read are over QUEEN_LIST_MAX_BYTES "
                f"({self._state_max_bytes} bytes of keys and values): read fewer at a time "
                f"with keys, key_prefix or ripe_at_or_before")
        return rows

    async def delete_query(self, name: str, *, tenant: str = "") -> bool:
        async with self._db.session() as conn:
            return await sql.delete_query(conn, tenant=tenant, name=name)

    async def list_queries(self, *, tenant: str = "") -> list[sql.QueryPartitionRow]:
        async with self._db.session() as conn:
            return await sql.list_queries(conn, tenant=tenant)

    async def cycle(self, cycle: Cycle, *, tenant: str = "") -> CycleResult:
        """Commit one cycle of a query of the tenant, or nothing (`success: false` with the
        reason); another tenant's query or partition is one that does not exist."""
        qid, pid = query_uuid(cycle.query_id), partition_id_of(cycle.partition_id)
        if qid is None:
            return CycleResult(False, "query not found")
        if pid is None:
            return CycleResult(False, "partition not found")
        if cycle.pushes:
            self._require_direct_writes()
            await self._tenants.admit_write(
                tenant, {(p.queue, p.partition) for p in cycle.pushes},
                [len(p.payload) for p in cycle.pushes])
        try:
            return await self._commit(cycle, qid, pid, tenant)
        except CapacityExceeded as full:  # a sink queue's maxSize: nothing was written
            return CycleResult(False, full.message)

    async def _commit(self, cycle: Cycle, qid: uuid.UUID, pid: int,
                      tenant: str) -> CycleResult:
        flushes = _flushes(cycle, tenant)
        work, targets = writes.prepare(flushes)
        try:
            async with self._db.session() as conn:
                row = await sql.cycle(conn, tenant=tenant, query_id=qid, partition_id=pid,
                                      group=cycle.group,
                                      ops=cycle.ops, targets=targets,
                                      default_options=options.DEFAULTS_JSON, ack=cycle.ack)
            if row.error is not None:
                return CycleResult(False, row.error, row.source_queue)
            appended = writes.written(work, queue_ids=row.sink_queue_ids,
                                      partition_ids=row.sink_partition_ids,
                                      bases=row.sink_bases, times=row.sink_times)
        except sql.CycleNeedsWritePath:
            try:
                async with self._db.transaction() as conn:
                    row = await sql.cycle(conn, tenant=tenant, query_id=qid, partition_id=pid,
                                          group=cycle.group, ops=cycle.ops, targets=[],
                                          default_options=options.DEFAULTS_JSON,
                                          ack=cycle.ack)
                    if row.error is not None:
                        raise _Refused(row)
                    appended = await writes.append(conn, flushes)
            except _Refused as refused:
                return CycleResult(False, refused.row.error, refused.row.source_queue)
        wakes: list[Wake] = [(a.queue_id, a.partition_id) for a in appended if a.queued]
        if row.wake_queue is not None:
            wakes.append((row.wake_queue, row.wake_partition))
        if wakes:
            await self._publish(wakes)
        COUNTERS.add("push_messages", sum(a.queued for a in appended))
        COUNTERS.add("ack_messages", row.ack_count)
        sinks = []
        for (name, _), a in zip(flushes, appended):
            sink = SinkResult(name.queue, name.partition)
            for v in a.verdicts:
                if v.status == "queued":
                    sink.queued += 1
                else:
                    sink.duplicate += 1
                sink.message_ids.append(str(v.message_id))
            sinks.append(sink)
        return CycleResult(True, None, row.source_queue, row.state_applied, sinks,
                           row.ack_count, row.lease_released)


def _flushes(cycle: Cycle, tenant: str) -> list[tuple[PartitionName, list[writes.NewMessage]]]:
    """The cycle's pushes as one flush per sink (queue, partition of the tenant's), in
    lock order; messages without an id get UUIDv7s minted in order (monotone within the
    cycle)."""
    by_name: dict[PartitionName, list[writes.NewMessage]] = {}
    for push, txid in zip(cycle.pushes, derived_transaction_ids(cycle)):
        by_name.setdefault(PartitionName(push.queue, push.partition, tenant), []).append(
            writes.NewMessage(push.message_id or uuid7(), txid, push.payload,
                              producer_sub=cycle.producer_sub))
    return sorted(by_name.items(), key=lambda f: f[0])  # lock order: see writes.append
