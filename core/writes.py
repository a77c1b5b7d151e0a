"""The write path below the coalescer: what a flush does to its partitions.

`append_on` turns the items of one partition's flush into one segment: duplicates already
stored are settled by `queen.append_segment` under the partition lock, which writes nothing
when it finds any; the blob is then rebuilt without them and appended. `append_many` writes
the flushes of several partitions in one statement (`queen.append_segments`), hence one
commit. Statements are autocommitted, so a partition lock is never held across a round trip
to this process.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeVar

import asyncpg

from core import segments
from core.db import DRIVER_ERRORS, Database, translate
from core.errors import QueenError, StorageUnavailable
from core.ids import PartitionId
from core.queries import QUERIES

T = TypeVar("T")


class PartitionGone(QueenError):
    """The partition was deleted (with its queue) after it was resolved."""


@dataclass(slots=True, eq=False)
class PackedFrames:
    """A segment blob a client already built (the framed push, wire-protocol §7.2): one zstd
    frame holding exactly `count` storage frames, checked by the edge to encode, in order,
    the messages that point at it."""

    blob: bytes
    count: int


@dataclass(slots=True)  # not frozen: one per message, and frozen __init__ is slow
class NewMessage:
    """One message to append, validated, with its message id (broker-minted, or the
    client's in a framed push)."""

    message_id: uuid.UUID
    transaction_id: str
    payload: bytes  # JSON bytes as received
    trace_id: uuid.UUID | None = None
    producer_sub: str | None = None
    # The client-built blob this message arrived in (its frames carry no producerSub). A
    # flush that writes exactly that blob's messages stores it as it came instead of
    # compressing them again, unless a producerSub was stamped on them since.
    packed: PackedFrames | None = None


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
    while pending:
        batch = [items[i] for i in pending]
        row = await _guarded(conn.fetchrow(
            QUERIES["append_segment"], partition_id, [m.transaction_id for m in batch],
            [m.message_id for m in batch], _pack(batch)))
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


async def append_many(db: Database, flushes: list[tuple[PartitionId, list[NewMessage]]]
                      ) -> list[list[Verdict] | QueenError]:
    """Flushes of several partitions at once: one statement, so one commit, for all of them
    (design.md, write path step 5); answers each flush's verdicts or its error.

    Flushes with a repeated transactionId inside, flushes that meet stored duplicates, and
    every flush when the fused statement fails for a reason other than an outage (a lock
    timeout, a deleted partition: it wrote nothing) are then settled one partition at a time,
    so one troubled partition fails only its own requests.
    """
    out: list[list[Verdict] | QueenError | None] = [None] * len(flushes)
    fusable = [i for i, (_, items) in enumerate(flushes)
               if len({m.transaction_id for m in items}) == len(items)]
    async with db.connection() as conn:
        if len(fusable) > 1:
            try:
                await _append_fused(conn, flushes, fusable, out)
            except StorageUnavailable as exc:
                return [exc] * len(flushes)
            except QueenError:
                pass
        for i, (partition_id, items) in enumerate(flushes):
            if out[i] is None:
                try:
                    out[i] = await append_on(conn, partition_id, items)
                except QueenError as exc:
                    out[i] = exc
    return [o for o in out if o is not None]


async def _append_fused(conn: asyncpg.Connection,
                        flushes: list[tuple[PartitionId, list[NewMessage]]], fusable: list[int],
                        out: list[list[Verdict] | QueenError | None]) -> None:
    # Ascending partition ids: concurrent fused flushes lock rows in one order.
    order = sorted(fusable, key=lambda i: flushes[i][0])
    txids: list[str] = []
    message_ids: list[uuid.UUID] = []
    for i in order:
        txids.extend(m.transaction_id for m in flushes[i][1])
        message_ids.extend(m.message_id for m in flushes[i][1])
    rows = await _guarded(conn.fetch(
        QUERIES["append_segments"], [flushes[i][0] for i in order],
        [len(flushes[i][1]) for i in order], txids, message_ids,
        [_pack(flushes[i][1]) for i in order]))
    for i, row in zip(order, rows):
        if row["dup_positions"]:
            continue  # wrote nothing: settled on its own, duplicates and all
        base, stamp = row["base_offset"], row["created_at"]
        out[i] = [Verdict("queued", m.message_id, base + k, stamp)
                  for k, m in enumerate(flushes[i][1])]


def _pack(messages: list[NewMessage]) -> bytes:
    packed = messages[0].packed if messages else None
    # Exactly the blob's messages (each message object is in a flush at most once, in the
    # order it arrived), unchanged: the client's frame is the segment. Anything else (a flush
    # merged with other pushes, duplicates taken out, a producerSub stamped) is compressed
    # here.
    if packed is not None and packed.count == len(messages) and all(
            m.packed is packed and m.producer_sub is None for m in messages):
        return packed.blob
    return segments.pack([segments.Frame(m.message_id, m.transaction_id, m.payload,
                                         m.trace_id, m.producer_sub) for m in messages])


async def _guarded(call: Awaitable[T]) -> T:
    """Await an append statement; a vanished partition becomes PartitionGone, driver errors
    become core errors."""
    try:
        return await call
    except asyncpg.PostgresError as exc:
        if getattr(exc, "sqlstate", None) == "QN001":
            raise PartitionGone() from exc
        raise translate(exc) from exc
    except DRIVER_ERRORS as exc:
        raise translate(exc) from exc
