"""Transactions (§4.7): pushes and acks committed together or not at all."""

from __future__ import annotations

from dataclasses import dataclass, field

import asyncpg

from core.ack import AckItem, AckOutcome, ack_on
from core.db import Database, storage_errors
from core.partitions import PartitionDirectory, PartitionRef, ensure_partition
from core.writes import NewMessage, PartitionGone, Verdict, append_on


@dataclass(frozen=True, slots=True)
class TxPush:
    queue: str
    partition: str
    message: NewMessage


@dataclass(frozen=True, slots=True)
class TxAck:
    group: str
    item: AckItem


@dataclass(slots=True)
class TxResult:
    committed: bool
    error: str | None = None
    verdicts: dict[int, Verdict] = field(default_factory=dict)  # op index -> push verdict
    acks: dict[int, AckOutcome] = field(default_factory=dict)  # op index -> ack outcome
    wake_queue_ids: list[int] = field(default_factory=list)


class _Rejected(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


async def run_transaction(db: Database, directory: PartitionDirectory,
                          ops: list[TxPush | TxAck], required_leases: list[str]) -> TxResult:
    """Apply every op in one database transaction; a rejected ack rolls everything back.

    Queues and partitions a push needs are created inside that transaction too, so a
    refused bundle creates nothing; the directory learns them only once they committed."""
    for attempt in (1, 2):
        created: list[PartitionRef] = []
        try:
            result = await _attempt(db, directory, ops, required_leases, created)
        except PartitionGone:
            for op in ops:  # a queue was deleted meanwhile: resolve again
                if isinstance(op, TxPush):
                    directory.forget_queue(op.queue)
            if attempt == 2:
                raise
            continue
        if result.committed:
            for ref in created:
                directory.remember(ref)
        return result
    raise AssertionError("unreachable")


async def _resolve(conn: asyncpg.Connection, directory: PartitionDirectory,
                   ops: list[TxPush | TxAck], created: list[PartitionRef]
                   ) -> dict[int, PartitionRef]:
    """The partition of every push op, created on `conn` when unknown. Creation goes in name
    order, so two bundles creating the same queues cannot deadlock on them."""
    wanted = sorted({(op.queue, op.partition) for op in ops if isinstance(op, TxPush)})
    by_key: dict[tuple[str, str], PartitionRef] = {}
    for key in wanted:
        ref = directory.cached(*key)
        if ref is None:
            ref = await ensure_partition(conn, *key)
            created.append(ref)
        by_key[key] = ref
    return {i: by_key[(op.queue, op.partition)] for i, op in enumerate(ops)
            if isinstance(op, TxPush)}


async def _attempt(db: Database, directory: PartitionDirectory, ops: list[TxPush | TxAck],
                   required_leases: list[str], created: list[PartitionRef]) -> TxResult:
    result = TxResult(committed=True)
    distinct = sorted(set(required_leases))
    default_lease = distinct[0] if len(distinct) == 1 else None
    try:
        async with db.transaction() as conn:
            with storage_errors():
                refs = await _resolve(conn, directory, ops, created)
                by_partition: dict[int, list[int]] = {}
                for i, ref in refs.items():
                    by_partition.setdefault(ref.partition_id, []).append(i)
                # Partition rows are locked in id order, so bundles cannot deadlock each other.
                for pid in sorted(by_partition):
                    indexes = by_partition[pid]
                    verdicts = await append_on(conn, refs[indexes[0]].partition_id,
                                               [ops[i].message for i in indexes])  # type: ignore[union-attr]
                    result.verdicts.update(zip(indexes, verdicts))
                    if any(v.status == "queued" for v in verdicts):
                        result.wake_queue_ids.append(refs[indexes[0]].queue_id)
                by_group: dict[str, list[int]] = {}
                for i, op in enumerate(ops):
                    if isinstance(op, TxAck):
                        by_group.setdefault(op.group, []).append(i)
                for group in sorted(by_group):
                    indexes = by_group[group]
                    acked = await ack_on(conn, group, [ops[i].item for i in indexes],  # type: ignore[union-attr]
                                         current_lease_as_default=True,
                                         default_lease=default_lease)
                    for i, outcome in zip(indexes, acked.outcomes):
                        if not outcome.success:
                            raise _Rejected(f"ack of {ops[i].item.transaction_id} "  # type: ignore[union-attr]
                                            f"rejected: {outcome.error}")
                        result.acks[i] = outcome
                    result.wake_queue_ids.extend(acked.wake_queue_ids)
    except _Rejected as rejected:
        return TxResult(committed=False, error=rejected.error)
    return result
