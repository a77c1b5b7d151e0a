"""Push: group validated items by partition, hand each group to the coalescer, gather verdicts.

Every flush is announced to parked pops once it committed (one span per partition). On
Citus the partitions' ids are learned before their items are handed over (one statement for
those not known yet: core/engine/directory.py), so that the coalescer puts only partitions
of one shard in one call and the call goes to that shard's node (core/storage/shards.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import msgspec

from core.engine.coalescer import WriteCoalescer
from core.engine.directory import DIRECTORY, PartitionName
from core.engine.writes import Appended, NewMessage, Verdict, append_each
from core.errors import QueenError, StorageUnavailable
from core.storage.database import Database


# One per message: msgspec builds a Struct in C, about twice as fast as a slots dataclass.
class PushItem(msgspec.Struct):
    queue: str
    partition: str
    message: NewMessage
    tenant: str = ""  # the queue's tenant (core/tenancy); '' is the default tenant


class PushOutcome(msgspec.Struct):  # one per message, as PushItem
    """One item's fate: a verdict, the error of the flush that carried it, or `buffered`
    (no verdict, no error: it is in the push spool, fsynced, on its way to the database)."""

    item: PushItem
    verdict: Verdict | None
    error: QueenError | None
    buffered: bool = False

    @property
    def partition_id(self) -> int | None:
        return self.verdict.partition_id if self.verdict is not None else None


class Pusher:
    """The write path of one process: a write coalescer keyed by (queue, partition) name."""

    def __init__(self, db: Database, *, max_flush_messages: int, max_pending_messages: int,
                 max_partitions_per_flush: int, max_concurrent_flushes: int,
                 max_flush_bytes: int, on_appended: Callable[[Appended], None],
                 answer_within_s: float | None = None) -> None:
        self._db = db
        self._shards = db.shards
        self._answer_within_s = answer_within_s
        self._on_appended = on_appended
        self.coalescer: WriteCoalescer[PartitionName, NewMessage, Verdict] = WriteCoalescer(
            self._flush, max_flush_items=max_flush_messages,
            max_pending_items=max_pending_messages, max_keys_per_flush=max_partitions_per_flush,
            max_concurrent_flushes=max_concurrent_flushes, max_flush_bytes=max_flush_bytes,
            group_of=self._shard_of if db.shards.distributed else None)

    def _shard_of(self, name: PartitionName) -> int:
        known = DIRECTORY.known(name)
        return -1 if known is None else self._shards.shard_of(known.partition_id)

    async def _flush(self, batch: list[tuple[PartitionName, list[NewMessage]]]
                     ) -> list[list[Verdict] | QueenError]:
        route = None
        if self._shards.distributed:
            known = DIRECTORY.known(batch[0][0])
            route = None if known is None else self._shards.route_of(known.partition_id)
        async with self._db.session(route) as conn:
            results = await append_each(conn, batch, route=route)
        out: list[list[Verdict] | QueenError] = []
        for result in results:
            if isinstance(result, Appended):
                if result.queued:  # committed: wake the partition's parked pops
                    self._on_appended(result)
                out.append(result.verdicts)
            else:
                out.append(result)
        return out

    async def push(self, items: Sequence[PushItem]) -> list[PushOutcome]:
        """Append items; answer one outcome per item, in request order."""
        by_name: dict[tuple[str, str, str], list[int]] = {}
        for index, item in enumerate(items):  # a plain tuple per item, a name per group
            by_name.setdefault((item.queue, item.partition, item.tenant), []).append(index)
        groups = {PartitionName(*name): indexes for name, indexes in by_name.items()}
        outcomes: list[PushOutcome | None] = [None] * len(items)
        if self._shards.distributed and any(DIRECTORY.known(n) is None for n in groups):
            try:
                async with self._db.session() as conn:
                    await DIRECTORY.learn(conn, list(groups))
            except QueenError as exc:
                return [PushOutcome(item, None, exc) for item in items]

        async def write_group(name: PartitionName, indexes: list[int]) -> None:
            try:
                # The write goes on if we stop waiting (the coalescer's promise): what commits
                # later is a dedup duplicate of the client's retry or of the spool's replay.
                async with asyncio.timeout(self._answer_within_s):
                    messages = [items[i].message for i in indexes]
                    verdicts = await self.coalescer.submit(
                        name, messages, size=sum(len(m.payload) for m in messages))
            except TimeoutError:
                for i in indexes:
                    outcomes[i] = PushOutcome(items[i], None, StorageUnavailable())
                return
            except QueenError as exc:
                for i in indexes:
                    outcomes[i] = PushOutcome(items[i], None, exc)
                return
            for i, verdict in zip(indexes, verdicts):
                outcomes[i] = PushOutcome(items[i], verdict, None)

        if len(groups) == 1:  # the common case needs no gather
            ((name, indexes),) = groups.items()
            await write_group(name, indexes)
        else:
            await asyncio.gather(*(write_group(n, ix) for n, ix in groups.items()))
        return [o for o in outcomes if o is not None]

    async def close(self) -> None:
        await self.coalescer.close()
