"""The write path below the coalescer: what a flush does to its partitions.

`append` writes the flushes of several partitions in one statement
(`queen.append_partitions`, one transaction and one commit when the connection is idle),
each flush as one segment (or a few: a client-built blob goes in as it came, beside a
segment of the other messages). Partitions are addressed by name with the id the process
remembers for them (core/engine/directory.py); the statement looks up what it is not given
(creating the partitions and queues that do not exist) and answers the ids, which are
remembered for the next flush. A partition whose messages meet stored duplicates
writes nothing and says which; those messages are taken out, the rest is written by the
next statement. So the common case is one statement for many partitions, and duplicates
cost a lookup of the stored messages' ids plus one more statement.

Segments of a queue with `encryptionEnabled` are sealed (core/engine/encryption.py). Which queues
those are is guessed from what earlier appends answered; the statement checks the guess
under the partition lock, writes nothing for a partition built the wrong way, and says how
the queue is set, so the next statement builds it again the right way.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import msgspec

from core import options, segments
from core.engine import encryption, record_meta
from core.engine.directory import DIRECTORY, Ids, PartitionName
from core.errors import QueenError, StorageError, StorageUnavailable
from core.ids import NIL_UUID
from core.storage import writes as sql
from core.storage.statements import Conn

_UNKNOWN_ID = uuid.UUID(NIL_UUID)
DEFAULT_PARTITION = "Default"  # the partition of an item that names none (§2)
# (Tenant, queue name) -> encryptionEnabled, as the last append to it answered (absent:
# plain).
_encrypted_queues: dict[tuple[str, str], bool] = {}
_MAX_REMEMBERED_QUEUES = 100_000
# Rounds a flush may be refused for a wrong encryption guess (a configure racing it).
_MAX_ENCRYPTION_ROUNDS = 5


@dataclass(slots=True, eq=False)
class PackedFrames:
    """A segment blob a client already built (the framed push, wire-protocol §7.2): one zstd
    frame holding exactly `count` storage frames, checked by the edge to encode, in order,
    the messages that point at it."""

    blob: bytes
    count: int


# One per message: msgspec builds a Struct in C, about twice as fast as a slots dataclass's
# __init__ (`python -m loadtest probe step_cost`).
class NewMessage(msgspec.Struct):
    """One message to append, validated, with its message id (broker-minted, or the
    client's in a framed push)."""

    message_id: uuid.UUID
    transaction_id: str
    payload: bytes  # JSON bytes as received
    trace_id: uuid.UUID | None = None
    producer_sub: str | None = None
    # The client-built blob this message arrived in (its frames carry no producerSub). A
    # flush that writes all of that blob's messages, in order and unchanged, stores the
    # blob as it came instead of compressing them again.
    packed: PackedFrames | None = None
    # A record produced through the Kafka edge: its key, headers and timestamp, stored in
    # the segment's side-car (core/engine/record_meta.py).
    kafka: record_meta.RecordMeta | None = None


class Verdict(msgspec.Struct):  # one per message, as NewMessage
    status: Literal["queued", "duplicate"]
    message_id: uuid.UUID  # of the message stored (for a duplicate, of the one kept)
    partition_id: int
    offset: int | None = None  # for queued items, and duplicates of a stored message
    created_at: datetime | None = None


@dataclass(slots=True)
class Appended:
    """A partition's flush, written: its ids and one verdict per message, in order."""

    queue_id: int
    partition_id: int
    verdicts: list[Verdict]

    @property
    def queued(self) -> int:
        return sum(1 for v in self.verdicts if v.status == "queued")


def first_occurrences(items: Sequence[NewMessage]) -> list[int]:
    """For each item, the index of the first item with its transactionId (itself if first)."""
    seen: dict[str, int] = {}
    return [seen.setdefault(item.transaction_id, i) for i, item in enumerate(items)]


def segments_of(messages: Sequence[NewMessage]) -> list[sql.AppendSegment]:
    """The segments that store `messages` in order: a client-built blob as it came when
    all its messages are here, consecutive and unchanged; everything else packed here, in
    segments of about SEGMENT_TARGET_BYTES of payload (core/segments.py)."""
    out: list[sql.AppendSegment] = []
    plain: list[NewMessage] = []
    plain_bytes = 0
    target = segments.SEGMENT_TARGET_BYTES
    i = 0
    while i < len(messages):
        packed = messages[i].packed
        if packed is not None:
            run = messages[i:i + packed.count]
            if len(run) == packed.count and all(
                    m.packed is packed and m.producer_sub is None for m in run):
                if plain:
                    out.append(_pack(plain))
                    plain, plain_bytes = [], 0
                out.append(sql.AppendSegment(packed.blob, [m.transaction_id for m in run]))
                i += packed.count
                continue
        size = len(messages[i].payload)
        if plain and plain_bytes + size > target:
            out.append(_pack(plain))
            plain, plain_bytes = [], 0
        plain.append(messages[i])
        plain_bytes += size
        i += 1
    if plain:
        out.append(_pack(plain))
    return out


def _pack(messages: Sequence[NewMessage]) -> sql.AppendSegment:
    blob = segments.pack(messages)
    if any(m.kafka is not None for m in messages):
        blob += record_meta.encode([m.kafka for m in messages])
    return sql.AppendSegment(blob, [m.transaction_id for m in messages])


class _Flush:
    """One partition's messages on their way in: what is still to write, verdicts so far."""

    def __init__(self, name: PartitionName, messages: Sequence[NewMessage]) -> None:
        self.name = name
        self.messages = messages
        self.first = first_occurrences(messages)
        self.pending = list(range(len(messages)))
        self.verdicts: list[Verdict | None] = [None] * len(messages)
        self.ids: tuple[int, int] | None = None  # (queue id, partition id) once written
        self.encrypted = False  # whether the last target's segments were sealed
        self.encryption_rounds = 0

    def target(self) -> sql.AppendTarget:
        queue, partition = self.name.queue, self.name.partition
        namespace, task = options.derive_namespace_task(queue)
        batch = [self.messages[i] for i in self.pending]
        repeats = any(self.first[i] != i for i in self.pending)
        built = segments_of(batch)
        self.encrypted = _encrypted_queues.get((self.name.tenant, queue), False)
        if self.encrypted:
            # A client-built blob is sealed as it came: encrypted, still stored unchanged.
            built = [sql.AppendSegment(encryption.seal(s.blob, queue, partition),
                                       s.transaction_ids) for s in built]
        known = DIRECTORY.known(self.name)
        return sql.AppendTarget(queue, partition, namespace, task, built, repeats,
                                self.encrypted, known.partition_id if known else 0,
                                self.name.tenant)

    def settle(self, row: sql.AppendRow) -> dict[int, int]:
        """Take in the statement's answer; answer {message index: stored offset} of the
        duplicates whose stored message id is still to be read."""
        self.ids = (row.queue_id, row.partition_id)
        DIRECTORY.remember(self.name, Ids(row.queue_id, row.partition_id))
        if row.encrypted != self.encrypted:  # built the wrong way: nothing was written
            if len(_encrypted_queues) >= _MAX_REMEMBERED_QUEUES:
                _encrypted_queues.clear()
            _encrypted_queues[self.name.tenant, self.name.queue] = row.encrypted
            self.encryption_rounds += 1
            if self.encryption_rounds > _MAX_ENCRYPTION_ROUNDS:
                raise StorageError(f"encryptionEnabled of queue {self.name.queue!r} keeps "
                                   f"changing under this push; retry")
            return {}
        if row.base_offset is not None:
            assert row.created_at is not None
            for k, i in enumerate(self.pending):
                m = self.messages[i]
                self.verdicts[i] = Verdict("queued", m.message_id, row.partition_id,
                                           row.base_offset + k, row.created_at)
            self.pending = []
            return {}
        stored: dict[int, int] = {}
        dropped: set[int] = set()
        for pos, offset in zip(row.dup_positions or (), row.dup_offsets or ()):
            i = self.pending[pos - 1]
            dropped.add(i)
            if offset is not None:
                stored[i] = offset
        # A repeat of an earlier message of this flush answers with that message's id once
        # it is settled (below, in `result`).
        self.pending = [i for i in self.pending if i not in dropped]
        return stored

    def result(self) -> Appended:
        assert self.ids is not None
        verdicts: list[Verdict] = []
        for i, verdict in enumerate(self.verdicts):
            if verdict is None:
                original = self.verdicts[self.first[i]]
                verdict = Verdict("duplicate", original.message_id if original else _UNKNOWN_ID,
                                  self.ids[1])
            verdicts.append(verdict)
        return Appended(self.ids[0], self.ids[1], verdicts)


async def append(conn: Conn, flushes: Sequence[tuple[PartitionName, Sequence[NewMessage]]],
                 *, route: int | None = None) -> list[Appended]:
    """Write each partition's messages (all of them, or raise): autocommitted when `conn` is
    idle, else part of the caller's transaction (which then holds the partition locks until
    it commits). Answers one `Appended` per flush, in order. `route`: the shard all the
    partitions are on, when the caller grouped them so (core/storage/shards.py).

    A transactionId already stored in the partition inside its queue's dedup window is a
    duplicate; so is a repeat within one flush when deduplication is on (the first occurrence
    wins), whether it came in one request or two merged by the coalescer; with
    `dedupWindowSeconds` 0 nothing is a duplicate."""
    work = [_Flush(name, messages) for name, messages in flushes]
    todo = sorted(work, key=lambda f: f.name)  # one lock order for every writer
    while todo:
        rows = await sql.append(conn, route=route, targets=[f.target() for f in todo],
                                default_options=options.DEFAULTS_JSON)
        again: list[_Flush] = []
        for flush, row in zip(todo, rows):
            stored = flush.settle(row)
            if stored:
                await _read_stored_ids(conn, flush, stored)
            if flush.pending:
                again.append(flush)
        todo = again
    return [f.result() for f in work]


async def _read_stored_ids(conn: Conn, flush: _Flush, stored: dict[int, int]) -> None:
    """Duplicates answer with the id of the message already stored, read from its segment
    (the index keeps no message ids)."""
    assert flush.ids is not None
    ids: dict[int, uuid.UUID] = {}
    for seg in await sql.segments_at(conn, partition_id=flush.ids[1],
                                     offsets=sorted(set(stored.values()))):
        blob = encryption.opened(seg.blob, flush.name.queue, flush.name.partition)
        for k, frame in enumerate(segments.unpack(blob)):
            ids[seg.base_offset + k] = frame.message_id
    for i, offset in stored.items():
        flush.verdicts[i] = Verdict("duplicate", ids.get(offset, _UNKNOWN_ID), flush.ids[1],
                                    offset)


async def append_each(conn: Conn, flushes: Sequence[tuple[PartitionName, Sequence[NewMessage]]],
                      *, route: int | None = None) -> list[Appended | QueenError]:
    """`append` in one statement for all; if that fails for a reason other than an outage
    (a lock timeout: it wrote nothing), partition by partition, so one troubled partition
    fails only its own requests."""
    try:
        return list(await append(conn, flushes, route=route))
    except StorageUnavailable:
        raise
    except QueenError as exc:
        if len(flushes) == 1:
            return [exc]
    out: list[Appended | QueenError] = []
    for flush in flushes:
        try:
            out.extend(await append(conn, [flush], route=route))
        except StorageUnavailable:
            raise
        except QueenError as exc:
            out.append(exc)
    return out


def prepare(flushes: Sequence[tuple[PartitionName, Sequence[NewMessage]]]
            ) -> tuple[list[_Flush], list[sql.AppendTarget]]:
    """The flushes of a caller that appends inside a statement of its own (a stream cycle,
    core/streams), in lock order, with the targets that statement takes."""
    work = sorted((_Flush(name, messages) for name, messages in flushes), key=lambda f: f.name)
    return work, [f.target() for f in work]


def written(work: Sequence[_Flush], *, queue_ids: Sequence[int],
            partition_ids: Sequence[int], bases: Sequence[int],
            times: Sequence[datetime]) -> list[Appended]:
    """The verdicts of `prepare`d flushes that such a statement wrote whole."""
    for flush, qid, pid, base, at in zip(work, queue_ids, partition_ids, bases, times):
        flush.settle(sql.AppendRow(qid, pid, base, at, None, None, flush.encrypted))
    return [f.result() for f in work]
