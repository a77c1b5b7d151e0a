"""Typed calls of the timer statements (schema/queries/timers.sql)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.storage.statements import Conn, Statement


@dataclass(slots=True)
class AppliedRow:
    status: str  # scheduled | rescheduled | cancelled | absent
    txn: str | None
    deliver_at: datetime | None


@dataclass(slots=True)
class TimerRow:
    """A pending timer as peek and list show it (`payload` None in a list)."""

    queue: str
    timer_key: str
    partition: str
    deliver_at: datetime
    txn: str
    message_id: uuid.UUID
    payload: bytes | None
    payload_zstd: bool
    encrypted: bool
    producer_sub: str | None
    attempts: int
    last_error: str | None
    claimed: bool
    created_at: datetime
    updated_at: datetime


@dataclass(slots=True)
class QueueTimers:
    queue: str
    pending: int
    next_due: datetime
    failing: int


@dataclass(slots=True)
class ClaimedRow:
    """A due timer a fire holds."""

    queue: str
    timer_key: str
    partition: str
    txn: str
    message_id: uuid.UUID
    payload: bytes
    payload_zstd: bool
    sealed: bool
    producer_sub: str | None
    attempts: int
    created_at: datetime
    lag_seconds: float  # how late it is (the database's clock)
    tenant: str = ""  # the timer's (its destination queue's) tenant


@dataclass(slots=True)
class TimerWrite:
    """One op for `apply`, in the arrays the statement takes."""

    cancel: bool
    queue: str
    key: str
    partition: str = ""
    delay_ms: int = 0
    txn: str | None = None
    message_id: uuid.UUID | None = None
    payload: bytes = b""
    zstd: bool = False
    encrypted: bool = False
    sealed: bool = False


_APPLY = Statement("timers_apply", AppliedRow)


async def apply(conn: Conn, *, tenant: str, now: datetime | None, ops: Sequence[TimerWrite],
                producer_sub: str | None) -> list[AppliedRow]:
    return await _APPLY.rows(
        conn, tenant=tenant, now=now, cancels=[o.cancel for o in ops],
        queues=[o.queue for o in ops], keys=[o.key for o in ops],
        partitions=[o.partition for o in ops], delays_ms=[o.delay_ms for o in ops],
        txns=[o.txn for o in ops], message_ids=[o.message_id for o in ops],
        payloads=[o.payload for o in ops], zstd=[o.zstd for o in ops],
        encrypted=[o.encrypted for o in ops], sealed=[o.sealed for o in ops],
        producer_sub=producer_sub)


_ENCRYPTED = Statement[None]("timers_encrypted_queues")


async def encrypted_queues(conn: Conn, *, tenant: str, queues: Sequence[str]) -> set[str]:
    return set(await _ENCRYPTED.values(conn, queues=list(queues), tenant=tenant))


_PEEK = Statement("timers_peek", TimerRow)


async def peek(conn: Conn, *, tenant: str, queue: str, key: str) -> TimerRow | None:
    return await _PEEK.one(conn, queue=queue, key=key, tenant=tenant)


_PAGE = Statement("timers_page", TimerRow)


async def page(conn: Conn, *, tenant: str, queue: str, after: str,
               rows: int) -> list[TimerRow]:
    return await _PAGE.rows(conn, queue=queue, after=after, rows=rows, tenant=tenant)


_COUNT = Statement[None]("timers_count")


async def count(conn: Conn, *, tenant: str, queue: str, prefix: str) -> int:
    return int(await _COUNT.value(conn, queue=queue, prefix=prefix, tenant=tenant))


_QUEUES = Statement("timers_queues", QueueTimers)


async def queues(conn: Conn, *, tenant: str, after: str, rows: int) -> list[QueueTimers]:
    return await _QUEUES.rows(conn, after=after, rows=rows, tenant=tenant)


_CLAIM = Statement("timers_claim", ClaimedRow)


async def claim(conn: Conn, *, limit: int, shards: int = 1, shard: int = 0
                ) -> list[ClaimedRow]:
    """Due rows of destination partitions whose hash is `shard` modulo `shards`."""
    return await _CLAIM.rows(conn, limit=limit, shards=shards, shard=shard)


_DELETE = Statement[None]("timers_delete")


async def delete(conn: Conn, *, tenants: Sequence[str], queues: Sequence[str],
                 keys: Sequence[str]) -> int:
    return await _DELETE.run(conn, queues=list(queues), keys=list(keys), tenants=list(tenants))


_FAILED = Statement[None]("timers_failed")


async def failed(conn: Conn, *, tenants: Sequence[str], queues: Sequence[str],
                 keys: Sequence[str], errors: Sequence[str],
                 backoff_seconds: Sequence[float]) -> int:
    return await _FAILED.run(conn, queues=list(queues), keys=list(keys), errors=list(errors),
                             backoff_seconds=list(backoff_seconds), tenants=list(tenants))


_DEAD = Statement[None]("timers_dead_letter")


async def dead_letter(conn: Conn, *, tenant: str, queue: str, partition: str, namespace: str,
                      task: str, default_options: str, txn: str, message_id: uuid.UUID,
                      producer_sub: str | None, payload: bytes, error: str, attempts: int,
                      created_at: datetime) -> int:
    return int(await _DEAD.value(
        conn, tenant=tenant, queue=queue, partition=partition, namespace=namespace, task=task,
        default_options=default_options, txn=txn, message_id=message_id,
        producer_sub=producer_sub, payload=payload, error=error, attempts=attempts,
        created_at=created_at))


_NEXT_DUE = Statement[None]("timers_next_due")


async def next_due(conn: Conn) -> float | None:
    """Seconds until the earliest timer may be taken (negative when overdue)."""
    value = await _NEXT_DUE.value(conn)
    return None if value is None else float(value)


_PENDING = Statement[None]("timers_pending")


async def pending(conn: Conn, *, tenant: str | None) -> int:
    """Pending timers of every tenant (None), or of one."""
    return int(await _PENDING.value(conn, tenant=tenant))
