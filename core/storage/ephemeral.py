"""Typed calls of the ephemeral queue statements (schema/queries/ephemeral.sql; the
functions they call are in schema/functions/80_ephemeral.sql)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.ephemeral.model import Options
from core.storage.statements import Conn, Statement


@dataclass(frozen=True, slots=True)
class PushRow:
    status: str  # ok | full | unavailable
    pushed: int


@dataclass(frozen=True, slots=True)
class PoppedRow:
    epoch: int
    partition: str
    seq: int
    attempts: int
    payload: str
    bytes: int  # the payload's, as UTF-8


@dataclass(frozen=True, slots=True)
class DeleteRow:
    deleted: bool
    declared: bool


@dataclass(frozen=True, slots=True)
class EphemeralQueueRow:
    queue: str
    declared: bool
    depth: int
    bytes: int
    partitions: int
    groups: int
    drops_bounds: int
    drops_ttl: int
    drops_retry: int
    max_bytes: int | None
    max_length: int | None
    policy: str | None
    ttl_seconds: int | None
    lease_seconds: int | None
    retry_limit: int | None
    window_ms: int | None
    window_count: int | None


@dataclass(frozen=True, slots=True)
class RingRow:
    partition: str
    length: int
    bytes: int


@dataclass(frozen=True, slots=True)
class BacklogRow:
    group: str
    partition: str
    pending: int
    skipped: int


@dataclass(frozen=True, slots=True)
class SweepRow:
    woken: list[str] | None  # None: another sweep was running
    last_queue: str | None  # where the next batch starts; None: this one reached the end


@dataclass(frozen=True, slots=True)
class TotalsRow:
    queues: int
    depth: int
    bytes: int
    drops_bounds: int
    drops_ttl: int
    drops_retry: int


_PUSH = Statement("eph_push", PushRow)


async def push(conn: Conn, *, queue: str, partitions: Sequence[str], counts: Sequence[int],
               payloads: Sequence[str], cap_bytes: int, channel: str) -> list[PushRow]:
    """Several pushes to one queue in one call, in order: one row each."""
    return await _PUSH.rows(conn, queue=queue, partitions=list(partitions), counts=list(counts),
                            payloads=list(payloads), cap_bytes=cap_bytes, channel=channel)


_POP = Statement("eph_pop", PoppedRow)


async def pop(conn: Conn, *, queue: str, partition: str | None, group: str, batch: int,
              auto_ack: bool, max_bytes: int, spent: int) -> list[PoppedRow]:
    return await _POP.rows(conn, queue=queue, partition=partition, group=group, batch=batch,
                           auto_ack=auto_ack, max_bytes=max_bytes, spent=spent)


_ACK = Statement[None]("eph_ack")


async def ack(conn: Conn, *, queue: str, group: str, epochs: Sequence[int | None],
              partitions: Sequence[str], seqs: Sequence[int], statuses: Sequence[str],
              channel: str) -> list[str]:
    return await _ACK.values(conn, queue=queue, group=group, epochs=list(epochs),
                             partitions=list(partitions), seqs=list(seqs), statuses=list(statuses),
                             channel=channel)


_CONFIGURE = Statement[None]("eph_configure")


async def configure(conn: Conn, *, queue: str, sent: Any, max_bytes: int, max_length: int,
                    policy: str, ttl_seconds: int, lease_seconds: int, retry_limit: int,
                    window_ms: int, window_count: int) -> datetime:
    """Store a declaration: the options as sent, and the values in force."""
    stamp: datetime = await _CONFIGURE.value(
        conn, queue=queue, sent=json.dumps(sent), max_bytes=max_bytes, max_length=max_length,
        policy=policy, ttl_seconds=ttl_seconds, lease_seconds=lease_seconds,
        retry_limit=retry_limit, window_ms=window_ms, window_count=window_count)
    return stamp


_RESET = Statement[None]("eph_reset")


async def reset(conn: Conn, *, queue: str) -> int:
    dropped: int = await _RESET.value(conn, queue=queue)
    return dropped


_DELETE = Statement("eph_delete", DeleteRow)


async def delete(conn: Conn, *, queue: str) -> DeleteRow:
    return await _DELETE.single(conn, queue=queue)


_SWEEP = Statement("eph_sweep", SweepRow)


async def sweep(conn: Conn, *, idle_seconds: int, channel: str, after: str,
                limit: int) -> SweepRow:
    return await _SWEEP.single(conn, idle_seconds=idle_seconds, channel=channel, after=after,
                               limit=limit)


_CLAIM = Statement[None]("eph_sweeper_claim")


async def claim_sweeper(conn: Conn) -> bool:
    """True when this connection holds (or just took) the one sweeper's session lock."""
    claimed: bool = await _CLAIM.value(conn)
    return claimed


_OPTIONS = Statement("eph_options", Options)


async def options(conn: Conn, *, queue: str) -> Options:
    """The queue's options in force: its declaration's, else the defaults of §19.2."""
    return await _OPTIONS.single(conn, queue=queue)


_QUEUES = Statement("eph_queues", EphemeralQueueRow)


async def queues(conn: Conn, *, queue: str | None) -> list[EphemeralQueueRow]:
    return await _QUEUES.rows(conn, queue=queue)


_RINGS = Statement("eph_depth_partitions", RingRow)


async def rings(conn: Conn, *, queue: str) -> list[RingRow]:
    return await _RINGS.rows(conn, queue=queue)


_BACKLOGS = Statement("eph_depth_groups", BacklogRow)


async def backlogs(conn: Conn, *, queue: str) -> list[BacklogRow]:
    return await _BACKLOGS.rows(conn, queue=queue)


_TOTALS = Statement("eph_totals", TotalsRow)


async def totals(conn: Conn) -> TotalsRow:
    return await _TOTALS.single(conn)


_VACUUM = Statement[None]("eph_vacuum")


async def vacuum(conn: Conn) -> None:
    """Outside a transaction (VACUUM cannot run in one)."""
    await _VACUUM.run(conn)
