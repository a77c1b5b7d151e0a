"""Resolving (queue, partition) names to ids, creating them on first use, with a cache."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
import msgspec

from core import options
from core.db import Database, storage_errors
from core.errors import StorageError
from core.ids import PartitionId, QueueId
from core.queries import QUERIES

DEFAULT_PARTITION = "Default"
_DEFAULT_OPTIONS_JSON = msgspec.json.encode(options.DEFAULTS).decode()


@dataclass(frozen=True, slots=True)
class PartitionRef:
    queue: str
    partition: str
    queue_id: QueueId
    partition_id: PartitionId


class PartitionDirectory:
    """Names to ids. A cached entry can go stale when a queue is deleted (by any process):
    the append then reports the partition gone and the caller forgets it and resolves again."""

    def __init__(self, db: Database, *, max_entries: int = 200_000) -> None:
        self._db = db
        self._max_entries = max_entries
        self._cache: dict[tuple[str, str], PartitionRef] = {}

    async def resolve(self, queue: str, partition: str) -> PartitionRef:
        ref = self.cached(queue, partition)
        if ref is None:
            async with self._db.connection() as conn:
                ref = await ensure_partition(conn, queue, partition)
            self.remember(ref)
        return ref

    def cached(self, queue: str, partition: str) -> PartitionRef | None:
        return self._cache.get((queue, partition))

    def remember(self, ref: PartitionRef) -> None:
        """Cache a ref; only refs whose rows are committed may be remembered."""
        if len(self._cache) >= self._max_entries:
            self._cache.clear()  # crude but bounded; misses only cost one lookup each
        self._cache[(ref.queue, ref.partition)] = ref

    def forget(self, ref: PartitionRef) -> None:
        self._cache.pop((ref.queue, ref.partition), None)

    def forget_queue(self, queue: str) -> None:
        for key in [k for k in self._cache if k[0] == queue]:
            del self._cache[key]


async def ensure_partition(conn: asyncpg.Connection, queue: str, partition: str) -> PartitionRef:
    """Create the queue and partition when missing, on `conn`: autocommitted when idle, or
    part of the caller's transaction (a rollback then creates nothing)."""
    namespace, task = options.derive_namespace_task(queue)
    with storage_errors():
        row = await conn.fetchrow(QUERIES["ensure_partition"], queue, partition, namespace,
                                  task, _DEFAULT_OPTIONS_JSON)
    if row is None or row["partition_id"] is None:
        raise StorageError(f"could not create partition {partition!r} of queue {queue!r}")
    return PartitionRef(queue, partition, QueueId(row["queue_id"]),
                        PartitionId(row["partition_id"]))
