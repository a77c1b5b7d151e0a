"""Typed calls of the trace statements (schema/queries/traces.sql)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.storage.statements import Conn, Statement


@dataclass(frozen=True, slots=True)
class TraceRow:
    id: uuid.UUID
    event_type: str
    data: bytes  # JSON as posted
    consumer_group: str
    worker_id: str | None
    created_at: datetime
    trace_names: list[str]


@dataclass(frozen=True, slots=True)
class NamedTraceRow(TraceRow):
    """A trace found by name, with its message's address."""

    transaction_id: str
    partition_id: int
    queue: str | None  # None once the partition is gone
    partition: str | None
    msg_offset: int | None


@dataclass(frozen=True, slots=True)
class TraceNameRow:
    name: str
    trace_count: int
    message_count: int
    last_seen: datetime
    total: int  # names matching, all pages


_INSERT = Statement[None]("trace_insert")


async def insert(conn: Conn, *, tenant: str, trace_id: uuid.UUID, partition_id: int,
                 transaction_id: str, group: str, event_type: str, data: bytes,
                 names: Sequence[str]) -> datetime | None:
    """The trace's created_at; None when the tenant has no partition of that id (nothing
    written)."""
    created: datetime | None = await _INSERT.value(conn, trace_id=trace_id,
                                                   partition_id=partition_id,
                                                   transaction_id=transaction_id, group=group,
                                                   event_type=event_type, data=data,
                                                   names=list(names), tenant=tenant)
    return created


_OF_MESSAGE = Statement("traces_of_message", TraceRow)


async def of_message(conn: Conn, *, tenant: str, partition_id: int, transaction_id: str,
                     limit: int, offset: int, max_bytes: int) -> list[TraceRow]:
    """A page of a message's traces, ended early where their data pass `max_bytes` (the
    first kept)."""
    return await _OF_MESSAGE.rows(conn, partition_id=partition_id, transaction_id=transaction_id,
                                  limit=limit, offset=offset, max_bytes=max_bytes,
                                  tenant=tenant)


_COUNT_OF_MESSAGE = Statement[None]("traces_count_of_message")


async def count_of_message(conn: Conn, *, tenant: str, partition_id: int,
                           transaction_id: str) -> int:
    return int(await _COUNT_OF_MESSAGE.value(conn, partition_id=partition_id,
                                              transaction_id=transaction_id, tenant=tenant))


_BY_NAME = Statement("traces_by_name", NamedTraceRow)


async def by_name(conn: Conn, *, tenant: str, name: str, limit: int, offset: int,
                  max_bytes: int) -> list[NamedTraceRow]:
    """A page of the traces of a name, ended early where their data pass `max_bytes` (the
    first kept)."""
    return await _BY_NAME.rows(conn, name=name, limit=limit, offset=offset,
                               max_bytes=max_bytes, tenant=tenant)


_COUNT_BY_NAME = Statement[None]("traces_count_by_name")


async def count_by_name(conn: Conn, *, tenant: str, name: str) -> int:
    return int(await _COUNT_BY_NAME.value(conn, name=name, tenant=tenant))


_NAMES_PAGE = Statement("trace_names_page", TraceNameRow)


async def names_page(conn: Conn, *, tenant: str, limit: int, offset: int,
                     search: str | None) -> list[TraceNameRow]:
    return await _NAMES_PAGE.rows(conn, limit=limit, offset=offset, search=search, tenant=tenant)


_DELETE_PARTITIONS = Statement[None]("traces_delete_partitions")


async def delete_partitions(conn: Conn, *, partition_ids: Sequence[int]) -> int:
    return await _DELETE_PARTITIONS.run(conn, partition_ids=list(partition_ids))


_EXPIRE = Statement[None]("reaper_expire_traces")


async def expire(conn: Conn, *, retention_seconds: int, batch: int) -> int:
    return int(await _EXPIRE.value(conn, retention_seconds=retention_seconds, batch=batch))
