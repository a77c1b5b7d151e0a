"""Typed calls of the streams statements (schema/queries/streams.sql, functions/50_streams.sql)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.errors import StorageError
from core.storage.statements import Conn, Statement
from core.storage.writes import AppendTarget, append_arguments
from core.streams.cycle import CycleAck, StateOp

# SQLSTATE queen.stream_cycle raises when its sink pushes need the ordinary write path.
_NEEDS_WRITE_PATH = "QN010"


class CycleNeedsWritePath(Exception):
    """The one-statement cycle wrote nothing: a sink push met a stored duplicate or was
    built for the other encryption setting. Run the cycle in a transaction instead."""


@dataclass(frozen=True, slots=True)
class RegisterRow:
    query_id: uuid.UUID
    outcome: str  # fresh | same | reset | conflict


@dataclass(slots=True)
class StateRow:
    key: str
    value: str  # JSON text
    updated_at: datetime
    matched: int  # rows the read matched: more than it answered when past its byte bound


@dataclass(slots=True)
class CycleRow:
    error: str | None
    source_queue: str | None
    ack_count: int
    lease_released: bool
    wake_queue: int | None
    wake_partition: int | None
    state_applied: int
    sink_queue_ids: list[int]
    sink_partition_ids: list[int]
    sink_bases: list[int]
    sink_times: list[datetime]


@dataclass(slots=True)
class QueryPartitionRow:
    query_id: uuid.UUID
    name: str
    source_queue: str
    sink_queue: str | None
    config_hash: str
    created_at: datetime
    partition_id: int | None
    partition: str | None
    cycles: int
    last_cycle_at: datetime | None
    state_keys: int
    state_bytes: int


_REGISTER = Statement("stream_register", RegisterRow)


async def register(conn: Conn, *, tenant: str, name: str, source_queue: str,
                   sink_queue: str | None, config_hash: str, reset: bool) -> RegisterRow:
    return await _REGISTER.single(conn, name=name, source_queue=source_queue, sink_queue=sink_queue,
                                  config_hash=config_hash, reset=reset, tenant=tenant)


_STATE_GET = Statement("stream_state_get", StateRow)


async def state_get(conn: Conn, *, tenant: str, query_id: uuid.UUID, partition_id: int,
                    keys: Sequence[str], key_prefix: str, ripe_at_or_before: int | None,
                    max_bytes: int) -> list[StateRow]:
    return await _STATE_GET.rows(conn, query_id=query_id, partition_id=partition_id,
                                 keys=list(keys), key_prefix=key_prefix,
                                 ripe_at_or_before=ripe_at_or_before, max_bytes=max_bytes,
                                 tenant=tenant)


_CYCLE = Statement("stream_cycle", CycleRow)


async def cycle(conn: Conn, *, tenant: str, query_id: uuid.UUID, partition_id: int, group: str,
                ops: Sequence[StateOp], targets: Sequence[AppendTarget], default_options: str,
                ack: CycleAck | None) -> CycleRow:
    """One cycle in one statement; raises CycleNeedsWritePath when its pushes need the
    write path (nothing was written then)."""
    try:
        row = await _CYCLE.one(
            conn, tenant=tenant, query_id=query_id, partition_id=partition_id, group=group,
            deletes=[o.delete for o in ops], keys=[o.key for o in ops],
            values=[o.value for o in ops], **append_arguments(targets, default_options),
            ack=ack is not None, lease_id=ack.lease_id if ack else None,
            ok=ack.ok if ack else None, release=ack.release if ack else None,
            count=ack.count if ack else None,
            ack_transaction_id=ack.transaction_id if ack else None)
    except StorageError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == _NEEDS_WRITE_PATH:
            raise CycleNeedsWritePath() from None
        raise
    assert row is not None
    return row


_DELETE = Statement[None]("stream_delete_query")


async def delete_query(conn: Conn, *, tenant: str, name: str) -> bool:
    return await _DELETE.value(conn, name=name, tenant=tenant) is not None


_LIST = Statement("stream_list", QueryPartitionRow)


async def list_queries(conn: Conn, *, tenant: str) -> list[QueryPartitionRow]:
    return await _LIST.rows(conn, tenant=tenant)
