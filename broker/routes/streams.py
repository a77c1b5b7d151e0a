"""Streams (wire-protocol-extensions §18): `/streams/v1/queries`, `/state/get`, `/cycle`,
plus the dashboard's listing and a query's deletion."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from broker.auth.gate import Identity
from broker.state import broker_of
from broker.wire.http import json_response
from broker.wire.streams import (
    AckResultOut,
    CycleAnswer,
    CycleBody,
    PushResultOut,
    QueryDeleted,
    QueryList,
    QueryNamePath,
    QueryOut,
    QueryPartitionOut,
    RegisterAnswer,
    RegisterBody,
    RegisterConflict,
    StateAnswer,
    StateGetBody,
    StateRowOut,
)
from core.errors import BadRequest, PayloadTooLarge
from core.streams.cycle import (
    MAX_KEY_BYTES,
    MAX_STATE_OPS,
    MAX_STATE_VALUE_BYTES,
    Cycle,
    CycleAck,
    CyclePush,
    StateOp,
)
from core.timefmt import iso
from core.types import DEFAULT_PARTITION, QUEUE_MODE, parse_status

MAX_QUERY_NAME_BYTES = 255
_EMPTY_OBJECT = b"{}"


def _required(**fields: str | None) -> list[str]:
    """The fields' values, checked in order: a missing or empty one is `<field> is
    required` (§18.1, §18.3)."""
    out: list[str] = []
    for name, value in fields.items():
        if not value:
            raise BadRequest(f"{name} is required")
        out.append(value)
    return out


def conflict_text(name: str) -> str:
    return (f"config_hash mismatch: operator chain changed for queryId '{name}'. Pass "
            f"reset:true to wipe existing state, or use a new queryId.")


async def register(request: Request, body: RegisterBody, tenant: str) -> Response:
    name, source, config_hash = _required(name=body.name, source_queue=body.source_queue,
                                          config_hash=body.config_hash)
    if len(name.encode()) > MAX_QUERY_NAME_BYTES:
        raise BadRequest(f"name is longer than {MAX_QUERY_NAME_BYTES} bytes")
    if len(config_hash.encode()) > MAX_QUERY_NAME_BYTES:
        raise BadRequest(f"config_hash is longer than {MAX_QUERY_NAME_BYTES} bytes")
    reg = await broker_of(request).streams.register(
        name=name, source_queue=source, sink_queue=body.sink_queue or None,
        config_hash=config_hash, reset=body.reset, tenant=tenant)
    if reg.outcome == "conflict":
        return json_response(RegisterConflict(False, str(reg.query_id), name,
                                              conflict_text(name)), 409)
    return json_response(RegisterAnswer(True, str(reg.query_id), name, config_hash,
                                        reg.outcome == "fresh", reg.outcome == "reset"))


def state_failure(error: str) -> StateAnswer:
    """The body of state/get's 4xx answers (§18.2)."""
    return StateAnswer(False, [], error=error)


async def state_get(request: Request, body: StateGetBody, tenant: str) -> Response:
    if not body.query_id or not body.partition_id:
        raise BadRequest("query_id and partition_id are required")
    ripe = body.ripe_at_or_before
    if ripe is not None and not -(2 ** 62) < ripe < 2 ** 62:
        raise BadRequest("ripe_at_or_before is out of range")
    # The keys go to the statement as one array: as many as a cycle may write (the answer
    # has a byte bound of its own: core/streams/service.py).
    if body.keys and len(body.keys) > MAX_STATE_OPS:
        raise PayloadTooLarge(f"{len(body.keys)} keys is over the limit of {MAX_STATE_OPS}")
    rows = await broker_of(request).streams.state_get(
        query_id=body.query_id, partition_id=body.partition_id, keys=body.keys or [],
        key_prefix=body.key_prefix or "", ripe_at_or_before=None if ripe is None
        else int(ripe // 1), tenant=tenant)
    return json_response(StateAnswer(True, [
        StateRowOut(r.key, msgspec.Raw(r.value.encode()), iso(r.updated_at)) for r in rows]))


def _walk_strings(value: Any, where: str) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            raise BadRequest(f"{where} contains NUL (\\u0000), which state values cannot hold")
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk_strings(k, where)
            _walk_strings(v, where)
    elif isinstance(value, list):
        for v in value:
            _walk_strings(v, where)


def _state_value(raw: msgspec.Raw | msgspec.UnsetType, where: str) -> str:
    data = bytes(raw) if isinstance(raw, msgspec.Raw) else _EMPTY_OBJECT
    if len(data) > MAX_STATE_VALUE_BYTES:
        raise PayloadTooLarge(f"{where} is {len(data)} bytes, over the limit of "
                              f"{MAX_STATE_VALUE_BYTES}")
    if b"\\u" in data:  # escapes: PostgreSQL's jsonb refuses \u0000 and lone surrogates
        try:
            _walk_strings(msgspec.json.decode(data), where)
        except (msgspec.DecodeError, RecursionError):
            raise BadRequest(f"{where} is not JSON that can be stored") from None
    return data.decode()


def _state_ops(body: CycleBody) -> list[StateOp]:
    if len(body.state_ops) > MAX_STATE_OPS:
        raise PayloadTooLarge(f"{len(body.state_ops)} state_ops is over the limit of "
                              f"{MAX_STATE_OPS} per cycle")
    ops: list[StateOp] = []
    for i, op in enumerate(body.state_ops):
        where = f"state_ops[{i}]"
        if len(op.key.encode()) > MAX_KEY_BYTES:
            raise BadRequest(f"{where}.key is longer than {MAX_KEY_BYTES} bytes")
        if op.type == "upsert":
            ops.append(StateOp(False, op.key, _state_value(op.value, f"{where}.value")))
        elif op.type == "delete":
            ops.append(StateOp(True, op.key, ""))
        else:
            raise BadRequest(f"Unknown state_op type: {op.type}")
    return ops


def _pushes(body: CycleBody, max_items: int) -> list[CyclePush]:
    pushes: list[CyclePush] = []
    for item in body.push_items:
        if not item.queue:  # skipped (§18.3)
            continue
        raw = item.payload if isinstance(item.payload, msgspec.Raw) else item.data
        payload = bytes(raw) if isinstance(raw, msgspec.Raw) else _EMPTY_OBJECT
        pushes.append(CyclePush(item.queue, item.partition or DEFAULT_PARTITION, payload,
                                item.transactionId or None,
                                item.messageId.value if item.messageId else None))
    if len(pushes) > max_items:
        raise PayloadTooLarge(f"more than {max_items} push_items in one cycle")
    return pushes


def _ack(body: CycleBody) -> CycleAck | None:
    ack = body.ack
    if ack is None:
        return None
    ok = parse_status(ack.status) == "completed"
    return CycleAck(ack.leaseId or "", ok, body.release_lease, ack.count,
                    ack.transactionId or None)


async def cycle(request: Request, body: CycleBody, identity: Identity,
                tenant: str) -> Response:
    query_id, partition_id = _required(query_id=body.query_id,
                                       partition_id=body.partition_id)
    broker = broker_of(request)
    request_cycle = Cycle(query_id, partition_id,
                          body.consumer_group or QUEUE_MODE, _state_ops(body),
                          _pushes(body, broker.settings.max_push_items), _ack(body),
                          identity.sub)
    result = await broker.streams.cycle(request_cycle, tenant=tenant)
    answer = CycleAnswer(result.success, query_id, partition_id, result.source_queue)
    if not result.success:
        answer.error = result.error or "cycle failed"
        return json_response(answer)
    answer.state_ops_applied = result.state_ops_applied
    answer.push_results = [PushResultOut(s.queue, s.partition,
                                         "queued" if s.queued else "duplicate", s.queued,
                                         s.duplicate, s.message_ids) for s in result.sinks]
    if request_cycle.ack is not None:
        answer.ack_result = AckResultOut(True, result.ack_count, result.lease_released, False)
    return json_response(answer)


async def list_queries(request: Request, tenant: str) -> Response:
    rows = await broker_of(request).streams.list_queries(tenant=tenant)
    by_id: dict[str, QueryOut] = {}
    for r in rows:
        q = by_id.get(str(r.query_id))
        if q is None:
            q = by_id[str(r.query_id)] = QueryOut(
                str(r.query_id), r.name, r.source_queue, r.sink_queue, r.config_hash,
                iso(r.created_at), [])
        if r.partition_id is not None:
            q.partitions.append(QueryPartitionOut(
                str(r.partition_id), r.partition, r.cycles,
                iso(r.last_cycle_at) if r.last_cycle_at else None, r.state_keys,
                r.state_bytes))
    return json_response(QueryList(list(by_id.values())))


async def delete_query(request: Request, path: QueryNamePath, tenant: str) -> Response:
    deleted = await broker_of(request).streams.delete_query(path.name, tenant=tenant)
    return json_response(QueryDeleted(deleted, path.name))
