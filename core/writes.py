"""The write path below the coalescer: what one flush does to one partition.

`append_flush` turns the items of a flush into one segment: duplicates inside the flush are
settled here (first wins), duplicates already stored are settled by `queen.append_segment`
under the partition lock, which writes nothing when it finds any; the blob is then rebuilt
without them and appended. One autocommitted statement per attempt, so the partition lock is
never held across a round trip to this process.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import asyncpg

from core import segments
from core.db import Database, translate
from core.errors import QueenError
from core.ids import PartitionId
from core.queries import QUERIES


class PartitionGone(QueenError):
    """The partition was deleted (with its queue) after it was resolved."""


@dataclass(slots=True)  # not frozen: one per message, and frozen __init__ is slow
class NewMessage:
    """One message to append, validated, with its broker-minted id."""

    message_id: uuid.UUID
    transaction_id: str
    payload: bytes  # JSON bytes as received
    trace_id: uuid.UUID | None = None
    producer_sub: str | None = None


@dataclass(slots=True)  # not frozen: one per message, and frozen __init__ is slow
class Verdict:
    status: Literal["queued", "duplicate"]
    message_id: uuid.UUID
    offset: int | None = None  # for queued items
    created_at: datetime | None = None


def first_occurrences(items: list[NewMessage]) -> list[int]:
    """For each item, the index of the first item with its transactionId (itself if first)."""
    seen: dict[str, int] = {}
    return [seen.setdefault(item.transaction_id, i) for i, item in enumerate(items)]


async def append_flush(db: Database, partition_id: PartitionId,
                       items: list[NewMessage]) -> list[Verdict]:
    """One coalescer flush: each attempt is one autocommitted statement."""
    async with db.connection() as conn:
        return await append_on(conn, partition_id, items)


async def append_on(conn: asyncpg.Connection, partition_id: PartitionId,
                    items: list[NewMessage]) -> list[Verdict]:
    """Append items to a partition on `conn`: autocommitted when `conn` is idle, or part of
    the caller's transaction (transactions, DLQ retry), which then holds the partition lock
    until it commits.

    A repeat of a transactionId among `items` (inside one request, or across requests merged
    into one flush) is settled by the database as if it came after the first occurrence: a
    duplicate of it while deduplication is on, a new message when `dedupWindowSeconds` is 0.
    So a push gets the same answer whether or not the coalescer merged it with others. Items
    are written in their order: those before the first repeat, then that repeat alone (its
    answer tells whether deduplication is on), then everything else; three statements, plus
    one more per step that meets ids already stored.
    """
    first = first_occurrences(items)
    verdicts: list[Verdict | None] = [None] * len(items)
    cut = next((i for i, f in enumerate(first) if f != i), len(items))
    await _append_round(conn, partition_id, items, list(range(cut)), verdicts)
    if cut < len(items):
        await _append_round(conn, partition_id, items, [cut], verdicts)
        rest = list(range(cut + 1, len(items)))
        probe = verdicts[cut]  # items[cut] repeats an item stored just before
        if probe is not None and probe.status == "duplicate":
            # Deduplication is on: write the first occurrences; every repeat is a duplicate
            # carrying its first occurrence's id.
            await _append_round(conn, partition_id, items,
                                [i for i in rest if first[i] == i], verdicts)
            for i in rest:
                original = verdicts[first[i]]
                if verdicts[i] is None and original is not None:
                    verdicts[i] = Verdict("duplicate", original.message_id)
        else:  # deduplication is off: nothing is a duplicate
            await _append_round(conn, partition_id, items, rest, verdicts)
    out = [v for v in verdicts if v is not None]
    assert len(out) == len(items)
    return out


async def _append_round(conn: asyncpg.Connection, partition_id: PartitionId,
                        items: list[NewMessage], indexes: list[int],
                        verdicts: list[Verdict | None]) -> None:
    """Append items[indexes] as one segment, settling those the database finds stored."""
    pending = indexes
    sql = QUERIES["append_segment"]
    while pending:
        batch = [items[i] for i in pending]
        blob = segments.pack([
            segments.Frame(m.message_id, m.transaction_id, m.payload, m.trace_id,
                           m.producer_sub) for m in batch])
        try:
            row = await conn.fetchrow(
                sql, partition_id, [m.transaction_id for m in batch],
                [m.message_id for m in batch], blob)
        except asyncpg.PostgresError as exc:
            if getattr(exc, "sqlstate", None) == "QN001":
                raise PartitionGone() from exc
            raise translate(exc) from exc
        except (asyncpg.InterfaceError, OSError, ConnectionError) as exc:
            raise translate(exc) from exc
        assert row is not None
        if row["dup_positions"]:
            for pos, stored_id in zip(row["dup_positions"], row["dup_message_ids"]):
                verdicts[pending[pos - 1]] = Verdict("duplicate", stored_id)
            pending = [i for i in pending if verdicts[i] is None]
            continue
        base, stamp = row["base_offset"], row["created_at"]
        for k, i in enumerate(pending):
            verdicts[i] = Verdict("queued", items[i].message_id, base + k, stamp)
        pending = []
