"""Transactions (§4.7): pushes and acks committed together or not at all, with riders
(wire-protocol-extensions §17): ops of other stores (KV, timers) that commit with them.

An ack op is checked against the lease it carries; an op without one is lent the bundle's
required lease when the bundle names exactly one, and is otherwise checked against none
(docs/acks.md). Whoever holds the partition now never decides: in a bundle of two leases, an
op of a lease that expired stays refused after another consumer took the partition over.

A rider is applied first in the transaction's connection (so its rows are locked before
queues, partitions and consumer rows: one lock order for every transaction), at the
transaction's instant (`now()`). It answers one entry per op, or a refusal (a lost
precondition) that rolls everything back; a §4.7 failure (a refused ack) still wins over a
rider's refusal, so the pushes and acks run in either case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from core.engine.ack import AckOutcome, GroupAck, apply_acks
from core.engine.directory import PartitionName
from core.engine.push import PushItem
from core.engine.wakeup import Wake
from core.engine.writes import Verdict, append
from core.storage.database import Database
from core.storage.statements import Conn


@dataclass(frozen=True, slots=True)
class RiderRefusal:
    """A rider's veto: `op_index` is its position among the rider's ops, `fields` the
    answer's fields (§17: reason, error, kvReason, version, value)."""

    op_index: int
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RiderOutcome:
    entries: list[dict[str, Any]]  # one per op, in op order (the edge numbers them)
    refusal: RiderRefusal | None = None


class Rider(Protocol):
    """Ops of another store that ride a transaction (§17)."""

    kind: str  # the field of the body it came from: "kv", "timers"

    def __len__(self) -> int: ...

    @property
    def grows(self) -> bool:
        """Whether its ops may add stored bytes (refused while the tenant is at its storage
        quota, core/tenancy)."""
        ...

    @property
    def creates(self) -> set[tuple[str, str]]:
        """The (queue, partition) pairs its ops may create (held to the tenant's caps)."""
        ...

    async def apply(self, conn: Conn) -> RiderOutcome:
        """Apply the ops inside the transaction (on `conn`)."""
        ...

    def committed(self) -> None:
        """Told once the transaction committed (for counters)."""
        ...


@dataclass(slots=True)
class TxResult:
    committed: bool
    error: str | None = None
    reason: str | None = None  # why it was refused: "ack_rejected" (a rider's: `refusal`)
    # The rider that vetoed the bundle, and its refusal (committed is then False).
    refused_by: Rider | None = None
    refusal: RiderRefusal | None = None
    riders: list[RiderOutcome] = field(default_factory=list)  # in the riders' order
    verdicts: dict[int, Verdict] = field(default_factory=dict)  # op index -> push verdict
    acks: dict[int, AckOutcome] = field(default_factory=dict)  # op index -> ack outcome
    wakes: list[Wake] = field(default_factory=list)  # to announce once committed


class _Rejected(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class _Vetoed(Exception):
    def __init__(self, rider: Rider, refusal: RiderRefusal) -> None:
        super().__init__(refusal.fields.get("reason"))
        self.rider = rider
        self.refusal = refusal


async def run_transaction(db: Database, ops: list[PushItem | GroupAck],
                          required_leases: list[str],
                          riders: Sequence[Rider] = (), *, tenant: str = "") -> TxResult:
    """Apply the riders, then every op, in one database transaction; a rejected ack or a
    rider's refusal rolls everything back (the ack's failure is the one answered). Every
    op is `tenant`'s, whatever its own `tenant` field says: its pushes go to that tenant's
    queues, and an ack of another tenant's partition is refused as one of a partition that
    does not exist.

    Queues and partitions a push needs are created inside that transaction too, so a
    refused bundle creates nothing."""
    result = TxResult(committed=True)
    distinct = set(required_leases)
    lent = distinct.pop() if len(distinct) == 1 else None
    pushes: dict[PartitionName, list[int]] = {}
    acks: list[int] = []
    for i, op in enumerate(ops):
        if isinstance(op, PushItem):
            pushes.setdefault(PartitionName(op.queue, op.partition, tenant), []).append(i)
        else:
            acks.append(i)
    try:
        async with db.transaction() as conn:
            for rider in riders:
                result.riders.append(await rider.apply(conn))
            if pushes:
                flushes = [(name, [_push(ops[i]).message for i in indexes])
                           for name, indexes in pushes.items()]
                for indexes, appended in zip(pushes.values(), await append(conn, flushes)):
                    result.verdicts.update(zip(indexes, appended.verdicts))
                    if appended.queued:
                        result.wakes.append((appended.queue_id, appended.partition_id))
            if acks:
                applied = await apply_acks(conn, [_fenced(_ack(ops[i]), lent, tenant)
                                                  for i in acks])
                for i, outcome in zip(acks, applied.outcomes):
                    if not outcome.success:
                        raise _Rejected(_rejection(_ack(ops[i]), outcome.error))
                    result.acks[i] = outcome
                result.wakes.extend(applied.wakes)
            for rider, answered in zip(riders, result.riders):
                if answered.refusal is not None:
                    raise _Vetoed(rider, answered.refusal)
    except _Rejected as rejected:
        return TxResult(committed=False, error=rejected.error, reason="ack_rejected")
    except _Vetoed as vetoed:
        return TxResult(committed=False, refused_by=vetoed.rider, refusal=vetoed.refusal)
    for rider in riders:
        rider.committed()
    return result


def _fenced(op: GroupAck, lent: str | None, tenant: str) -> GroupAck:
    """The op with the lease it is checked against: its own, else the one lent."""
    item = op.item if op.item.lease_id else msgspec.structs.replace(op.item, lease_id=lent)
    return GroupAck(op.group, item, tenant)


def _rejection(op: GroupAck, error: str | None) -> str:
    """The answer's error: which ack was refused, why, and that nothing was applied."""
    return (f"ack of transactionId '{op.item.transaction_id}' (partitionId "
            f"{op.item.partition_id}, consumer group '{op.group}') rejected: "
            f"{error or 'refused'}; transaction rolled back")


def _push(op: PushItem | GroupAck) -> PushItem:
    assert isinstance(op, PushItem)
    return op


def _ack(op: PushItem | GroupAck) -> GroupAck:
    assert isinstance(op, GroupAck)
    return op
