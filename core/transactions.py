"""Transactions (§4.7): pushes and acks committed together or not at all."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.ack import AckItem, AckOutcome, GroupAck, apply_acks
from core.storage.database import Database
from core.wakeup import Wake
from core.writes import NewMessage, PartitionName, Verdict, append


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
    wakes: list[Wake] = field(default_factory=list)  # to announce once committed


class _Rejected(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


async def run_transaction(db: Database, ops: list[TxPush | TxAck],
                          required_leases: list[str]) -> TxResult:
    """Apply every op in one database transaction; a rejected ack rolls everything back.

    Queues and partitions a push needs are created inside that transaction too, so a
    refused bundle creates nothing."""
    result = TxResult(committed=True)
    distinct = sorted(set(required_leases))
    default_lease = distinct[0] if len(distinct) == 1 else None
    pushes: dict[PartitionName, list[int]] = {}
    acks: list[int] = []
    for i, op in enumerate(ops):
        if isinstance(op, TxPush):
            pushes.setdefault(PartitionName(op.queue, op.partition), []).append(i)
        else:
            acks.append(i)
    try:
        async with db.transaction() as conn:
            if pushes:
                flushes = [(name, [_push(ops[i]).message for i in indexes])
                           for name, indexes in pushes.items()]
                for indexes, appended in zip(pushes.values(), await append(conn, flushes)):
                    result.verdicts.update(zip(indexes, appended.verdicts))
                    if appended.queued:
                        result.wakes.append((appended.queue_id, appended.partition_id))
            if acks:
                applied = await apply_acks(
                    conn, [GroupAck(_ack(ops[i]).group, _ack(ops[i]).item) for i in acks],
                    lease_from_cursor=True, default_lease=default_lease)
                for i, outcome in zip(acks, applied.outcomes):
                    if not outcome.success:
                        raise _Rejected(f"ack of {_ack(ops[i]).item.transaction_id} "
                                        f"rejected: {outcome.error}")
                    result.acks[i] = outcome
                result.wakes.extend(applied.wakes)
    except _Rejected as rejected:
        return TxResult(committed=False, error=rejected.error)
    return result


def _push(op: TxPush | TxAck) -> TxPush:
    assert isinstance(op, TxPush)
    return op


def _ack(op: TxPush | TxAck) -> TxAck:
    assert isinstance(op, TxAck)
    return op
