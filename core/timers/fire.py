"""One fire (§16.4): take due timers, push each as a message through the write path and
remove it, in one transaction: both or neither.

The due rows are taken `FOR UPDATE SKIP LOCKED` (earliest first), so concurrent fires (two
firer processes, two brokers on one database) never take one timer twice, and a cancel or
reschedule of a timer being fired waits for the fire and then finds it gone. The messages
go through `core.engine.writes.append` exactly as a push's: the queue and partition are created
when missing, the partition's dedup window applies to the timer's `txn` (a timer fired again
after a crash between commit and acknowledgement appends nothing and is still removed),
segments of an encryptionEnabled queue are sealed, and the stored `producerSub` is kept.
Many timers of one partition go into one segment; many partitions into one statement.

A timer whose payload cannot become a message (not decodable, not one JSON document, or a
destination that refuses it) fails permanently: one more attempt, the error, a backoff of
min(60 s, 2^(attempts-1) s); the fifth failure moves it to the DLQ of its destination
partition (group `__timer__`, offset -1). A database failure (a ServiceError) is raised and
costs nothing: the transaction rolls back and the rows are due again.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import msgspec

from core import options
from core.engine import encryption
from core.engine.directory import PartitionName
from core.engine.wakeup import Wake
from core.engine.writes import Appended, NewMessage, append
from core.errors import QueenError, ServiceError
from core.segments import unpack_client_frame
from core.storage import timers as sql
from core.storage.statements import Conn

MAX_ATTEMPTS = 5
MAX_BACKOFF_SECONDS = 60.0
DLQ_GROUP = "__timer__"


class _Permanent(Exception):
    pass


@dataclass(slots=True)
class FireReport:
    taken: int = 0
    fired: int = 0  # removed after their message was appended (or found a duplicate)
    duplicates: int = 0
    failed: int = 0  # in backoff now
    dead: int = 0  # moved to the DLQ
    lags: list[float] = field(default_factory=list)  # seconds past deliverAt, per fired
    wakes: list[Wake] = field(default_factory=list)  # to announce after the commit


def backoff_seconds(attempts: int) -> float:
    """The wait after the `attempts`-th failed fire."""
    return min(MAX_BACKOFF_SECONDS, float(2 ** max(0, attempts - 1)))


def message_payload(row: sql.ClaimedRow, max_bytes: int) -> bytes:
    """The JSON bytes the timer's message carries; raises _Permanent when there are none."""
    data = row.payload
    if row.sealed:
        try:
            data = encryption.opened(data, row.queue, row.partition)
        except QueenError as exc:
            raise _Permanent(f"payload cannot be decrypted: {exc.message}") from None
    if row.payload_zstd:
        try:
            data = unpack_client_frame(data, max_size=max_bytes)
        except QueenError as exc:
            raise _Permanent(f"payload {exc.message}") from None
    try:
        msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        raise _Permanent("payload is not one JSON document") from None
    return data


async def fire_due(conn: Conn, *, limit: int, max_payload_bytes: int, shards: int = 1,
                   shard: int = 0) -> FireReport:
    """One batch of up to `limit` due timers (of the destination partitions in `shard` of
    `shards`), in the caller's open transaction."""
    report = FireReport()
    rows = await sql.claim(conn, limit=limit, shards=shards, shard=shard)
    report.taken = len(rows)
    if not rows:
        return report
    groups: dict[PartitionName, list[tuple[sql.ClaimedRow, NewMessage]]] = {}
    broken: list[tuple[sql.ClaimedRow, str]] = []
    for row in rows:
        try:
            payload = message_payload(row, max_payload_bytes)
        except _Permanent as exc:
            broken.append((row, str(exc)))
            continue
        groups.setdefault(PartitionName(row.queue, row.partition, row.tenant), []).append(
            (row, NewMessage(row.message_id, row.txn, payload, None, row.producer_sub)))
    done: list[sql.ClaimedRow] = []
    for name_group, appended in await _append_groups(conn, list(groups.items()), broken):
        for row, _ in name_group:
            done.append(row)
            report.lags.append(row.lag_seconds)
        report.duplicates += sum(1 for v in appended.verdicts if v.status == "duplicate")
        if appended.queued:
            report.wakes.append((appended.queue_id, appended.partition_id))
    if done:
        await sql.delete(conn, tenants=[r.tenant for r in done], queues=[r.queue for r in done],
                         keys=[r.timer_key for r in done])
    report.fired = len(done)
    await _record_failures(conn, broken, report, max_payload_bytes)
    return report


async def _append_groups(
        conn: Conn, groups: list[tuple[PartitionName, list[tuple[sql.ClaimedRow, NewMessage]]]],
        broken: list[tuple[sql.ClaimedRow, str]],
) -> list[tuple[list[tuple[sql.ClaimedRow, NewMessage]], Appended]]:
    """Append every group in one statement; if a destination refuses (not a database
    failure), each group again on its own, under a savepoint, and the refused groups'
    timers join `broken`."""
    if not groups:
        return []
    flushes = [(name, [m for _, m in members]) for name, members in groups]
    try:
        async with conn.transaction():  # a savepoint: a refusal must not abort the fire
            results = await append(conn, flushes)
        return [(members, a) for (_, members), a in zip(groups, results)]
    except ServiceError:
        raise
    except QueenError as exc:
        if len(groups) == 1:
            broken.extend((row, f"destination refused: {exc.message}") for row, _ in groups[0][1])
            return []
    out = []
    for name, members in groups:
        out.extend(await _append_groups(conn, [(name, members)], broken))
    return out


async def _record_failures(conn: Conn, broken: list[tuple[sql.ClaimedRow, str]],
                           report: FireReport, max_payload_bytes: int) -> None:
    retry = [(row, error) for row, error in broken if row.attempts + 1 < MAX_ATTEMPTS]
    dead = [(row, error) for row, error in broken if row.attempts + 1 >= MAX_ATTEMPTS]
    if retry:
        await sql.failed(conn, tenants=[r.tenant for r, _ in retry],
                         queues=[r.queue for r, _ in retry],
                         keys=[r.timer_key for r, _ in retry], errors=[e for _, e in retry],
                         backoff_seconds=[backoff_seconds(r.attempts + 1) for r, _ in retry])
    for row, error in dead:
        namespace, task = options.derive_namespace_task(row.queue)
        await sql.dead_letter(
            conn, tenant=row.tenant, queue=row.queue, partition=row.partition, namespace=namespace, task=task,
            default_options=options.DEFAULTS_JSON, txn=row.txn, message_id=row.message_id,
            producer_sub=row.producer_sub, payload=_dead_payload(row, max_payload_bytes),
            error=error,
            attempts=row.attempts + 1, created_at=row.created_at)
    if dead:
        await sql.delete(conn, tenants=[r.tenant for r, _ in dead],
                         queues=[r.queue for r, _ in dead], keys=[r.timer_key for r, _ in dead])
    report.failed, report.dead = len(retry), len(dead)


def _dead_payload(row: sql.ClaimedRow, max_bytes: int) -> bytes:
    """What the dead letter shows: the decoded payload when it is JSON, else its bytes as a
    base64 JSON string. A payload the broker sealed stays sealed (the DLQ stores payloads
    in its own column, outside the sealed segments): its base64 then."""
    data = row.payload
    if not row.sealed and row.payload_zstd:
        try:
            data = unpack_client_frame(data, max_size=max_bytes)
        except QueenError:
            pass
    if not row.sealed:
        try:
            msgspec.json.decode(data)
            return data
        except (msgspec.DecodeError, RecursionError):
            pass
    return msgspec.json.encode(base64.b64encode(data).decode())
