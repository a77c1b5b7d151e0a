"""Partition ids by (tenant, queue, name), as this process learned them.

The log's statements address partitions by id: on Citus a statement goes to the shard its
ids hash to (core/storage/shards.py), so the broker must know the ids before it sends one. A
process learns a partition's id once, from `queen.partition_ids` (which creates the queue and
the partition when they are missing, schema/functions/20_append.sql) or from the directory
(`partition_lookup`, which creates nothing), and remembers it here.

A remembered id can go stale: the queue was deleted and made again under new ids, or the id
was learned from another database by the same process (tests open several). Every statement
that takes a remembered id is given the names too and answers "gone" when the id is not the
partition of those names any more; the caller then forgets it and learns it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core import options
from core.storage import writes as sql
from core.storage.statements import Conn

_MAX_REMEMBERED = 200_000
Ids = sql.PartitionIds  # a partition's (queue id, partition id), as `partition_ids` answers


@dataclass(frozen=True, slots=True, order=True)
class PartitionName:
    queue: str
    partition: str
    tenant: str = ""  # the queue's tenant (core/tenancy); '' is the default tenant


class Directory:
    def __init__(self, capacity: int = _MAX_REMEMBERED) -> None:
        self._ids: dict[PartitionName, Ids] = {}
        self._capacity = capacity

    def known(self, name: PartitionName) -> Ids | None:
        return self._ids.get(name)

    def remember(self, name: PartitionName, ids: Ids) -> None:
        if len(self._ids) >= self._capacity:
            self._ids.clear()  # everything is learned again, once
        self._ids[name] = ids

    def forget(self, name: PartitionName) -> None:
        self._ids.pop(name, None)

    async def learn(self, conn: Conn, names: Sequence[PartitionName]) -> None:
        """Learn the ids of the names not known yet, creating the partitions (and queues)
        that do not exist: one statement, in name order (the order every writer creates
        partitions in)."""
        wanted = sorted({n for n in names if n not in self._ids})
        if not wanted:
            return
        derived = [options.derive_namespace_task(n.queue) for n in wanted]
        rows = await sql.partition_ids(
            conn, tenants=[n.tenant for n in wanted], queues=[n.queue for n in wanted],
            partitions=[n.partition for n in wanted],
            namespaces=[d[0] for d in derived], tasks=[d[1] for d in derived],
            default_options=options.DEFAULTS_JSON)
        for name, row in zip(wanted, rows):
            self.remember(name, row)

    async def look_up(self, conn: Conn, name: PartitionName) -> tuple[int, int | None] | None:
        """(queue id, partition id or None when the queue has no such partition), or None
        when the queue is unknown; creates nothing. A known id is answered from memory."""
        ids = self._ids.get(name)
        if ids is not None:
            return ids.queue_id, ids.partition_id
        row = await sql.partition_lookup(conn, tenant=name.tenant, queue=name.queue,
                                         partition=name.partition)
        if row is None:
            return None
        if row.partition_id is not None:
            self.remember(name, Ids(row.queue_id, row.partition_id))
        return row.queue_id, row.partition_id


# The process's directory (ids are checked against names wherever they are used, so one
# directory serves every database the process talks to).
DIRECTORY = Directory()
