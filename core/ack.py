"""Ack: an offset commit per (partition, consumer group).

Rules (wire-protocol §4.5): `completed` at offset N commits N and everything before it; with
mixed outcomes the cursor is clamped just below the lowest signal (at equal offsets
dlq > failed > retry); `failed` spends the retry budget of the partition's head and then
dead-letters; `dlq` dead-letters at once; `retry` releases without spending budget; a given
leaseId that is not the live holder's moves nothing. A failed/dlq signal above offsets that
nobody acknowledged only releases the lease: the message is dead-lettered once it is at the
head, so nothing before it is ever skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import asyncpg
import msgspec

from core import options, segments
from core.db import Database, storage_errors
from core.fetch import frame_at
from core.queries import QUERIES

Status = Literal["completed", "failed", "retry", "dlq"]
_SIGNAL_RANK = {"dlq": 0, "failed": 1, "retry": 2}  # lower wins at equal offsets
_COMPLETED_WORDS = {"", "completed", "success", "acked", "ok"}
_SCAN_LIMIT = 100_000  # most offsets scanned when the transactionId index lost a row


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


@dataclass(frozen=True, slots=True)
class AckItem:
    transaction_id: str
    partition_id: str  # as sent by the client; ours are decimal ids
    status: Status
    lease_id: str | None = None
    error: str | None = None


@dataclass(slots=True)
class AckOutcome:
    success: bool
    error: str | None = None
    lease_released: bool = False
    dlq: bool = False
    noop: bool = False


@dataclass(slots=True)
class AckResult:
    outcomes: list[AckOutcome]
    wake_queue_ids: list[int] = field(default_factory=list)


@dataclass(slots=True)
class GroupsResult:
    outcomes: dict[str, list[AckOutcome]]  # per group, in its items' order
    wake_queue_ids: list[int] = field(default_factory=list)


async def ack_groups(db: Database, groups: Mapping[str, Sequence[AckItem]]) -> GroupsResult:
    """Apply the acks of several groups in one transaction: all of it commits or none.

    Groups go in name order and each group's cursors in partition order, so concurrent
    calls lock cursors in one global order and cannot deadlock each other."""
    result = GroupsResult({})
    async with db.transaction() as conn:
        with storage_errors():
            for group in sorted(groups):
                applied = await ack_on(conn, group, groups[group])
                result.outcomes[group] = applied.outcomes
                result.wake_queue_ids.extend(applied.wake_queue_ids)
    return result


async def ack_on(conn: asyncpg.Connection, group: str, items: Sequence[AckItem], *,
                 current_lease_as_default: bool = False,
                 default_lease: str | None = None) -> AckResult:
    """Apply acks inside the caller's transaction.

    Transactions (§4.7) check a lease even when the op names none: the group's current lease
    on that partition (`current_lease_as_default`), else `default_lease`.
    """
    outcomes: list[AckOutcome | None] = [None] * len(items)
    by_partition: dict[int, list[int]] = {}
    for index, item in enumerate(items):
        text = item.partition_id
        if not (text.isascii() and text.isdigit()) or len(text) > 18:
            outcomes[index] = AckOutcome(False, "partition not found")
        else:
            by_partition.setdefault(int(item.partition_id), []).append(index)
    result = AckResult([])
    if by_partition:
        pids = sorted(by_partition)
        cursors = {r["partition_id"]: r for r in await conn.fetch(
            QUERIES["ack_lock_cursors"], pids, group)}
        offsets = await _resolve(conn, items, by_partition, cursors)
        updates: list[tuple[int, int, int, bool, int]] = []
        for pid in pids:
            cursor = cursors.get(pid)
            indexes = by_partition[pid]
            if cursor is None:
                for i in indexes:
                    outcomes[i] = AckOutcome(False, "consumer not found")
                continue
            update, wake = await _apply(conn, group, cursor, items, indexes, offsets,
                                        outcomes, current_lease_as_default, default_lease)
            if update is not None:
                updates.append(update)
            if wake:
                result.wake_queue_ids.append(cursor["queue_id"])
        if updates:
            await conn.execute(QUERIES["ack_update_cursors"], [u[0] for u in updates], group,
                               [u[1] for u in updates], [u[2] for u in updates],
                               [u[3] for u in updates], [u[4] for u in updates])
    result.outcomes = [o if o is not None else AckOutcome(False, "not processed")
                       for o in outcomes]
    return result


async def _resolve(conn: asyncpg.Connection, items: Sequence[AckItem],
                   by_partition: dict[int, list[int]],
                   cursors: dict[int, asyncpg.Record]) -> dict[int, int]:
    """Offset per item index: the earliest occurrence above the cursor, else the latest one
    at or below it (an already committed message)."""
    pairs = [(pid, i) for pid, idx in by_partition.items() if pid in cursors for i in idx]
    if not pairs:
        return {}
    rows = await conn.fetch(QUERIES["ack_resolve"], [p for p, _ in pairs],
                            [items[i].transaction_id for _, i in pairs])
    seen: dict[tuple[int, str], list[int]] = {}
    for row in rows:
        seen.setdefault((row["partition_id"], row["transaction_id"]), []).append(
            row["msg_offset"])
    offsets: dict[int, int] = {}
    missing: dict[int, list[int]] = {}
    for pid, i in pairs:
        found = seen.get((pid, items[i].transaction_id))
        committed = cursors[pid]["committed"]
        if found:
            above = [o for o in found if o > committed]
            offsets[i] = min(above) if above else max(found)
        else:
            missing.setdefault(pid, []).append(i)
    for pid, idx in missing.items():  # index row pruned: look in the unacknowledged span
        await _scan_segments(conn, pid, cursors[pid], items, idx, offsets)
    return offsets


async def _scan_segments(conn: asyncpg.Connection, pid: int, cursor: asyncpg.Record,
                         items: Sequence[AckItem], indexes: list[int],
                         offsets: dict[int, int]) -> None:
    wanted = {items[i].transaction_id: i for i in reversed(indexes)}
    lo = cursor["committed"] + 1
    hi = min(cursor["last_offset"], lo + _SCAN_LIMIT)
    if hi < lo:
        return
    rows = await conn.fetch(QUERIES["pop_read_segments"], [pid], [lo], [hi], [0])
    for row in rows:
        for k, frame in enumerate(segments.unpack(row["blob"])):
            offset = row["base_offset"] + k
            if offset >= lo and frame.transaction_id in wanted:
                for i in indexes:
                    if items[i].transaction_id == frame.transaction_id and i not in offsets:
                        offsets[i] = offset
                wanted.pop(frame.transaction_id)
                if not wanted:
                    return


async def _apply(conn: asyncpg.Connection, group: str, cursor: asyncpg.Record,
                 items: Sequence[AckItem], indexes: list[int], offsets: dict[int, int],
                 outcomes: list[AckOutcome | None], current_lease_as_default: bool,
                 default_lease: str | None) -> tuple[tuple[int, int, int, bool, int] | None, bool]:
    """Decide one partition's acks; answer its cursor update (or None) and whether to wake
    waiters because a span became claimable."""
    committed: int = cursor["committed"]
    valid: list[int] = []
    for i in indexes:
        item = items[i]
        offset = offsets.get(i)
        lease = item.lease_id
        if lease is None and current_lease_as_default:
            lease = cursor["worker_id"] or default_lease
        if offset is None:
            outcomes[i] = AckOutcome(False, "Message not found")
        elif lease is not None and (lease != cursor["worker_id"] or not cursor["lease_live"]):
            outcomes[i] = AckOutcome(False, "invalid or expired lease")
        elif offset <= committed:
            outcomes[i] = (AckOutcome(True, noop=True) if item.status == "completed" else
                           AckOutcome(False, f"already committed (offset {offset} <= "
                                             f"cursor {committed})"))
        else:
            valid.append(i)
    if not valid:
        return None, False

    completed = [offsets[i] for i in valid if items[i].status == "completed"]
    signals = sorted((offsets[i], _SIGNAL_RANK[items[i].status], i)
                     for i in valid if items[i].status != "completed")
    top = max(completed) if completed else committed
    new = max(committed, min(top, signals[0][0] - 1) if signals else top)
    retries = cursor["retry_count"] if new == committed else 0  # the counter is the head's
    release = False
    dlq_index: int | None = None
    if signals:
        offset, _, index = signals[0]
        item = items[index]
        release = True
        queue_options = msgspec.json.decode(cursor["options"])
        if offset == new + 1:  # the signal is at the head: it takes effect now
            limit = int(queue_options.get("retryLimit", 3))
            if item.status == "dlq" or (item.status == "failed" and retries >= limit):
                if options.dlq_enabled(queue_options):
                    await _dead_letter(conn, group, cursor["partition_id"], offset,
                                       item.error or "Retries exhausted", retries)
                    dlq_index = index
                new, retries = offset, 0
            elif item.status == "failed":
                retries += 1
    elif cursor["batch_end"] is not None and new >= cursor["batch_end"]:
        release = True
    lease_released = release and cursor["worker_id"] is not None
    for i in valid:
        outcomes[i] = AckOutcome(True, lease_released=lease_released, dlq=(i == dlq_index))
    update = (cursor["partition_id"], new, retries, release, new - committed)
    wake = release and new < cursor["last_offset"]
    return update, wake


async def _dead_letter(conn: asyncpg.Connection, group: str, partition_id: int, offset: int,
                       error: str, retries: int) -> None:
    found = await frame_at(conn, partition_id, offset)
    if found is None:  # retention removed it meanwhile: nothing left to copy
        return
    frame, created_at = found
    await conn.execute(QUERIES["insert_dlq"], partition_id, group, offset,
                       frame.transaction_id, frame.message_id, frame.trace_id,
                       frame.producer_sub, frame.payload, error, retries, created_at)
