"""The Kafka edge's core service, `Broker.kafka` (see core/kafka/__init__.py).

Mapping (docs/kafka.md): a topic is a queue; Kafka partition n is our partition named "n"
(canonical decimal); Kafka offsets are our offsets; a Kafka group's committed offset is our
group cursor plus one (`committed = next offset - 1`), so a Kafka group and a Queen group of
one name are one group. A connection is one tenant's (its token's, broker/kafka/sasl.py):
every call names it, and sees only that tenant's queues and groups.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from core.admin import queues
from core.engine.listener import WakeupHub
from core.kafka import reads
from core.kafka.election import Election, Node
from core.storage import kafka as sql
from core.storage.database import Database
from core.tenancy.service import Tenants

# The widest topic a Kafka client is told of (a count above it is refused at creation).
MAX_PARTITIONS = 10_000


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    partitions: int
    declared: bool  # the count was declared (CreateTopics, auto-creation), not inferred


def partition_index(name: str) -> int | None:
    """The Kafka partition a partition name is, or None: only canonical decimals count."""
    if not name.isascii() or not name.isdigit() or (len(name) > 1 and name[0] == "0"):
        return None
    return int(name)


class Kafka:
    def __init__(self, db: Database, hub: WakeupHub, stop_waiting: asyncio.Event, *,
                 default_partitions: int, tenants: Tenants) -> None:
        self._db = db
        self._tenants = tenants  # quotas: a created topic is a queue of the tenant's
        self._hub = hub
        self._stop_waiting = stop_waiting
        self.default_partitions = default_partitions

    async def topics(self, names: Sequence[str] | None = None, *,
                     tenant: str = "") -> list[Topic]:
        """The tenant's queues as topics (every queue, or those named that exist): the
        declared count, or else what the partitions named "0", "1", ... imply, at least the
        default."""
        async with self._db.session() as conn:
            rows = await sql.topics(conn, tenant=tenant, names=names)
        out = []
        for row in rows:
            if row.declared is not None:
                width = max(row.declared, row.seen or 0)
            else:
                width = max(self.default_partitions, row.seen or 0)
            out.append(Topic(row.name, min(width, MAX_PARTITIONS), row.declared is not None))
        return out

    async def create_topic(self, name: str, partitions: int, *, tenant: str = "") -> bool:
        """Create the queue (default options) and declare its partition count; answers False
        (and changes nothing) when the queue exists already."""
        if await self.topics([name], tenant=tenant):
            return False
        await self._tenants.admit_names(tenant, [(name, None)])
        await queues.configure(self._db, tenant=tenant, queue=name, namespace=None, task=None,
                               given={}, replace=False)
        async with self._db.session() as conn:
            return await sql.declare(conn, tenant=tenant, queue=name, partitions=partitions)

    async def read(self, entries: Sequence[reads.FetchEntry], *, max_bytes: int,
                   min_bytes: int, max_wait_ms: int) -> list[reads.PartitionRead]:
        return await reads.read(self._db, self._hub, self._stop_waiting, entries,
                                max_bytes=max_bytes, min_bytes=min_bytes,
                                max_wait_ms=max_wait_ms)

    async def bounds(self, queue: str, partition: str, *,
                     tenant: str = "") -> reads.PartitionRead:
        """The partition's log start and high watermark (no records)."""
        return await reads.read_partition(self._db, reads.FetchEntry(queue, partition, 0, 0,
                                                                     tenant))

    async def offset_for_time(self, queue: str, partition: str, at: datetime, *,
                              tenant: str = "") -> tuple[int, datetime] | None:
        """The first offset appended at or after `at`, with its append time (None: nothing
        is that recent)."""
        async with self._db.session() as conn:
            row = await sql.offset_for_time(conn, tenant=tenant, queue=queue,
                                            partition=partition, at=at)
        return None if row is None else (row.offset, row.created_at)

    async def commit(self, group: str, queue: str, offsets: Mapping[str, int], *,
                     tenant: str = "") -> set[str]:
        """Set the group's position on partitions (the next offset it reads): its cursors
        become `offset - 1`. Answers the partitions set (none: the queue is unknown)."""
        if not offsets:
            return set()
        names = sorted(offsets)  # one lock order for concurrent commits
        async with self._db.session() as conn:
            done = await sql.commit(conn, tenant=tenant, group=group, queue=queue,
                                    partitions=names,
                                    committed=[offsets[n] - 1 for n in names])
        return done

    async def positions(self, group: str, queue: str, *, tenant: str = "") -> dict[str, int]:
        """The group's position (next offset to read) per partition with a cursor."""
        async with self._db.session() as conn:
            rows = await sql.committed(conn, tenant=tenant, group=group, queue=queue)
        return {r.name: r.committed + 1 for r in rows}

    async def group_names(self, *, tenant: str = "") -> list[str]:
        async with self._db.session() as conn:
            return await sql.group_names(conn, tenant=tenant)

    def election(self, *, cluster: str, me: Node, on_lost: Callable[[], None]) -> Election:
        """The group coordinator's election for this listener (run its `run_forever`)."""
        return Election(self._db, cluster=cluster, me=me, on_lost=on_lost)

    async def new_producer_id(self) -> int:
        """A producer id no producer had before, on any host, before or after a restart."""
        async with self._db.session() as conn:
            return await sql.new_producer_id(conn)

    async def all_positions(self, group: str, *,
                            tenant: str = "") -> dict[str, dict[str, int]]:
        """The group's positions on every queue of the tenant: queue -> partition -> next
        offset."""
        async with self._db.session() as conn:
            rows = await sql.group_positions(conn, tenant=tenant, group=group)
        out: dict[str, dict[str, int]] = {}
        for row in rows:
            out.setdefault(row.queue, {})[row.name] = row.committed + 1
        return out
