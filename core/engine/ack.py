"""Ack: an offset commit per (partition, consumer group), in one statement per call.

`queen.ack` (schema/functions/40_ack.sql) applies the rules of docs/acks.md inside the
database: it resolves each transactionId to its offset, commits cursors, spends retry
budgets, dead-letters and releases leases, for every group and partition of a call in one
statement (so the call is atomic). Resolution has one rule on every path (ack, ack batch,
transaction): the earliest occurrence of the id above the cursor, else the latest at or
below it. The index settles it alone unless the reaper pruned rows the answer depends on;
then the statement changes nothing and names the span where an earlier occurrence may
hide, the segments (zstd, unreadable in SQL) are searched here, and the statement runs
again with the offsets found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from core import segments
from core.engine import encryption
from core.ids import PartitionId, QueueId
from core.storage import reads as sql
from core.storage.statements import Conn

Status = Literal["completed", "failed", "retry", "dlq"]
_COMPLETED_WORDS = {"", "completed", "success", "acked", "ok"}
SCAN_LIMIT = 100_000  # most offsets searched when the transactionId index lost a row


def parse_status(value: object) -> Status:
    """The wire's status vocabulary; anything unrecognised counts as failed."""
    if value is None or value is True:
        return "completed"
    if value is False:
        return "failed"
    word = str(value).strip().lower()
    if word in _COMPLETED_WORDS:
        return "completed"
    if word in ("retry", "dlq"):
        return word  # type: ignore[return-value]
    return "failed"


# One per item: msgspec builds a Struct in C, about twice as fast as a slots dataclass.
class AckItem(msgspec.Struct):
    transaction_id: str
    partition_id: str  # as sent by the client; ours are decimal ids
    status: Status
    lease_id: str | None = None
    error: str | None = None


class AckOutcome(msgspec.Struct, frozen=True):  # shared by the items that end alike
    success: bool
    error: str | None = None
    lease_released: bool = False
    dlq: bool = False
    noop: bool = False
    conflated: int = 0  # superseded messages a conflated lease's commit retired (§20.3)


class GroupAck(msgspec.Struct):  # one per item, as AckItem
    """An ack item with the consumer group it commits for, and the caller's tenant (a
    partition of another tenant's queue is answered as one that does not exist)."""

    group: str
    item: AckItem
    tenant: str = ""


@dataclass(slots=True)
class AppliedAcks:
    outcomes: list[AckOutcome]  # one per item, in order
    # (queue, partition) where a span became claimable again: parked pops to wake
    wakes: list[tuple[QueueId, PartitionId]] = field(default_factory=list)


_UNKNOWN_PARTITION = AckOutcome(False, "partition not found")


def partition_id_of(text: str) -> int | None:
    """Our partition ids are decimal integers; any other text names no partition."""
    if text.isascii() and text.isdigit() and len(text) <= 18:
        return int(text)
    return None


async def apply_acks(conn: Conn, acks: Sequence[GroupAck], *,
                     route: int | None = None) -> AppliedAcks:
    """Apply acks of any groups on `conn` (atomically: one statement, or, when an address
    must be searched first, a statement that changes nothing and then the one that does).
    An item is checked against the lease it names, and against none when it names none.
    `route`: the shard all the items' partitions are on, when the caller grouped them so
    (core/storage/shards.py)."""
    outcomes: list[AckOutcome | None] = [None] * len(acks)
    positions: list[int] = []  # index in `acks` of each item the statement takes
    partition_ids: list[int] = []
    ids_of: dict[str, int | None] = {}  # a pop's acks name a few partitions
    for index, ack in enumerate(acks):
        text = ack.item.partition_id
        try:
            pid = ids_of[text]
        except KeyError:
            pid = ids_of[text] = partition_id_of(text)
        if pid is None:
            outcomes[index] = _UNKNOWN_PARTITION
            continue
        positions.append(index)
        partition_ids.append(pid)
    result = AppliedAcks([])
    if positions:
        taken = [acks[i] for i in positions] if len(positions) < len(acks) else acks
        lease_ids = [a.item.lease_id for a in taken]
        errors = [a.item.error for a in taken]
        inputs = sql.AckInputs(
            [a.group for a in taken], partition_ids, [a.item.transaction_id for a in taken],
            [a.item.status for a in taken],
            # All-null columns go as one null: the driver encodes arrays element by element.
            _or_null(lease_ids), _or_null(errors), [a.tenant for a in taken])
        rows = await sql.ack(conn, route=route, items=inputs, scan_missing=True)
        missing = [r for r in rows if r.outcome == "missing"]
        if missing:
            inputs.offsets = await _search(conn, inputs, missing)
            rows = await sql.ack(conn, route=route, items=inputs, scan_missing=False)
        # Most items of a call end alike (applied, the lease kept): they share one outcome.
        made: dict[tuple[str, str | None, bool | None, bool | None, int | None],
                   AckOutcome] = {}
        for row in rows:
            if row.outcome == "wake":
                assert row.queue_id is not None and row.partition_id is not None
                result.wakes.append((QueueId(row.queue_id), PartitionId(row.partition_id)))
                continue
            assert row.idx is not None
            shape = (row.outcome, row.error, row.lease_released, row.dlq, row.conflated)
            outcome = made.get(shape)
            if outcome is None:
                outcome = made[shape] = AckOutcome(
                    row.outcome in ("ok", "noop"), row.error, bool(row.lease_released),
                    bool(row.dlq), row.outcome == "noop", row.conflated or 0)
            outcomes[positions[row.idx - 1]] = outcome
    result.outcomes = [o if o is not None else AckOutcome(False, "not processed")
                       for o in outcomes]
    return result


async def _search(conn: Conn, inputs: sql.AckInputs,
                  missing: list[sql.AckRow]) -> list[int | None]:
    """Look for the earliest occurrence of each missing item's transactionId in the span
    queen.ack named (at most SCAN_LIMIT offsets from its start); answer the offsets found,
    one per item (None: not searched, or nothing found: the statement settles with the
    index's answer).

    The spans of one (partition, cursor) start at the same offset (the cursor's next) and
    differ in their ends, so each such start is read once, up to the farthest end."""
    found: dict[int, int] = {}  # item position (0-based) -> offset
    # (partition, start) -> transactionId -> [(item position, end of its span)]
    spans: dict[tuple[int, int], dict[str, list[tuple[int, int]]]] = {}
    for row in missing:
        assert row.idx is not None and row.scan_from is not None and row.scan_to is not None
        at = row.idx - 1
        end = min(row.scan_to, row.scan_from + SCAN_LIMIT - 1)
        spans.setdefault((inputs.partition_ids[at], row.scan_from), {}).setdefault(
            inputs.transaction_ids[at], []).append((at, end))
    for (pid, lo), wanted in spans.items():
        hi = max(end for items in wanted.values() for _, end in items)
        for seg in await sql.span_segments(conn, partition_id=pid, lo=lo, hi=hi):
            blob = encryption.opened(seg.blob, seg.queue, seg.partition)
            for k, frame in enumerate(segments.unpack(blob)):
                offset = seg.base_offset + k
                if offset < lo or frame.transaction_id not in wanted:
                    continue
                # The first occurrence from the start: the answer of every item whose span
                # reaches it; the others have none in theirs.
                for i, end in wanted.pop(frame.transaction_id):
                    if offset <= end:
                        found[i] = offset
            if not wanted:
                break
    return [found.get(i) for i in range(len(inputs.transaction_ids))]


def _or_null(column: list[str | None]) -> list[str | None] | None:
    """None for a column of nulls only."""
    return None if all(v is None for v in column) else column
