"""Push: group validated items by partition, hand each group to the coalescer, gather verdicts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from core.coalescer import WriteCoalescer
from core.db import Database
from core.errors import QueenError
from core.partitions import PartitionDirectory, PartitionRef
from core.writes import NewMessage, PartitionGone, Verdict, append_many


@dataclass(slots=True)  # not frozen: one per message, and frozen __init__ is slow
class PushItem:
    queue: str
    partition: str
    message: NewMessage


@dataclass(slots=True)  # not frozen: one per message, and frozen __init__ is slow
class PushOutcome:
    """One item's fate: a verdict, or the error of the flush that carried it."""

    item: PushItem
    verdict: Verdict | None
    error: QueenError | None
    partition_id: int | None


class Pusher:
    """The write path of one process: partition directory plus write coalescer."""

    def __init__(self, db: Database, *, max_flush_messages: int, max_pending_messages: int,
                 max_partitions_per_flush: int = 64, max_concurrent_flushes: int = 4,
                 on_appended: Callable[[PartitionRef], None] | None = None) -> None:
        self.directory = PartitionDirectory(db)
        self._db = db
        self.coalescer: WriteCoalescer[PartitionRef, NewMessage, Verdict] = WriteCoalescer(
            self._flush, max_flush_items=max_flush_messages,
            max_pending_items=max_pending_messages, max_keys_per_flush=max_partitions_per_flush,
            max_concurrent_flushes=max_concurrent_flushes, on_flushed=on_appended)

    async def _flush(self, batch: list[tuple[PartitionRef, list[NewMessage]]]
                     ) -> list[list[Verdict] | QueenError]:
        return await append_many(self._db, [(ref.partition_id, items) for ref, items in batch])

    async def push(self, items: list[PushItem]) -> list[PushOutcome]:
        """Append items; answer one outcome per item, in request order."""
        groups: dict[tuple[str, str], list[int]] = {}
        for index, item in enumerate(items):
            groups.setdefault((item.queue, item.partition), []).append(index)
        outcomes: list[PushOutcome | None] = [None] * len(items)

        async def write_group(queue: str, partition: str, indexes: list[int]) -> None:
            messages = [items[i].message for i in indexes]
            ref: PartitionRef | None = None
            try:
                for attempt in (1, 2):
                    ref = await self.directory.resolve(queue, partition)
                    try:
                        verdicts = await self.coalescer.submit(ref, messages)
                        break
                    except PartitionGone:
                        # Deleted since we cached it: forget, recreate, try once more.
                        self.directory.forget(ref)
                        if attempt == 2:
                            raise
            except QueenError as exc:
                pid = ref.partition_id if ref else None
                for i in indexes:
                    outcomes[i] = PushOutcome(items[i], None, exc, pid)
                return
            assert ref is not None
            for i, verdict in zip(indexes, verdicts):
                outcomes[i] = PushOutcome(items[i], verdict, None, ref.partition_id)

        await asyncio.gather(*(write_group(q, p, ix) for (q, p), ix in groups.items()))
        return [o for o in outcomes if o is not None]

    async def close(self) -> None:
        await self.coalescer.close()
