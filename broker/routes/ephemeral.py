"""Ephemeral queue routes (wire-protocol-extensions §19), over `broker.ephemeral`.

Every refusal is `{"error", "code"}` (§19.1): decoding refusals through the table's
`client_error` hook (`ephemeral_bad_request`), the service's own through `_answering`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from broker.errors import error_response
from broker.routes.pop import _watch_disconnect
from broker.state import broker_of, state_of
from broker.wire import ephemeral as wire
from broker.wire.common import given
from broker.wire.http import json_response
from core.ephemeral import EphemeralError, model
from core.errors import ClientError, Limited, QueenError, ServiceError
from core.timefmt import iso

P = ParamSpec("P")


def _answering(handler: Callable[P, Awaitable[Response]]) -> Callable[P, Awaitable[Response]]:
    """Answer the service's refusals with §19's envelope and code."""

    @functools.wraps(handler)
    async def serve(*args: P.args, **kwargs: P.kwargs) -> Response:
        try:
            return await handler(*args, **kwargs)
        except QueenError as exc:
            if isinstance(exc, Limited):
                raise  # a tenant's quota: one shape on every route (broker/errors.py)
            if isinstance(exc, EphemeralError):
                code = exc.code
            elif isinstance(exc, ServiceError):
                code = "ephemeral_unavailable"
            elif isinstance(exc, ClientError):
                code = "ephemeral_bad_request"
            else:
                raise
            answer = error_response(exc)
            return json_response(wire.EphemeralFailure(exc.message, code), answer.status_code,
                                 headers={k: v for k, v in answer.headers.items()
                                          if k in ("connection", "retry-after")})
    return serve


@_answering
async def eph_push(request: Request, body: wire.EphPushBody, tenant: str) -> Response:
    partition = given(body.partition) or model.DEFAULT_PARTITION
    payloads = [bytes(m.payload).decode("utf-8") for m in body.messages]
    pushed = await broker_of(request).ephemeral.push(body.queue, partition, payloads,
                                                     tenant=tenant)
    return json_response(wire.EphPushAnswer(pushed), 201)


@_answering
async def eph_pop(request: Request, query: wire.EphPopQuery, tenant: str) -> Response:
    timeout = given(query.timeout)
    if timeout is None:
        timeout = state_of(request).settings.default_timeout_ms
    timeout = max(0, min(timeout, model.MAX_TIMEOUT_MS))
    batch = max(1, min(query.batch, model.MAX_BATCH))
    gone = asyncio.Event()
    watcher = asyncio.create_task(_watch_disconnect(request, gone), name="eph-disconnect")
    try:
        popped = await broker_of(request).ephemeral.pop(
            queue=query.queue, partition=given(query.partition),
            group=given(query.group) or model.QUEUE_MODE, batch=batch,
            auto_ack=query.autoAck, wait=query.wait, timeout_ms=timeout, gone=gone,
            tenant=tenant)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    return json_response(wire.EphPopAnswer(query.queue, [
        wire.EphPoppedMessage(m.id, m.partition, m.attempts, msgspec.Raw(m.payload.encode()))
        for m in popped]))


@_answering
async def eph_ack(request: Request, body: wire.EphAckBody, tenant: str) -> Response:
    entries = [(a.id, a.status) for a in body.acks]
    outcomes = await broker_of(request).ephemeral.ack(
        queue=body.queue, group=given(body.group) or model.QUEUE_MODE, acks=entries,
        tenant=tenant)
    return json_response(wire.EphAckAnswer([wire.EphAckResult(i, o)
                                         for (i, _), o in zip(entries, outcomes)]))


@_answering
async def eph_configure(request: Request, body: wire.EphConfigureBody,
                        tenant: str) -> Response:
    stored = await broker_of(request).ephemeral.configure(body.queue, body.options,
                                                          tenant=tenant)
    sent = body.options if body.options is not None else {}
    return json_response(wire.EphConfigureAnswer(body.queue, sent, iso(stored)), 201)


@_answering
async def eph_reset(request: Request, body: wire.EphQueueBody, tenant: str) -> Response:
    dropped = await broker_of(request).ephemeral.reset(body.queue, tenant=tenant)
    return json_response(wire.EphResetAnswer(body.queue, dropped))


@_answering
async def eph_delete(request: Request, path: wire.EphQueuePath, tenant: str) -> Response:
    row = await broker_of(request).ephemeral.delete(path.queue, tenant=tenant)
    return json_response(wire.EphDeleteAnswer(path.queue, row.deleted, row.declared))


def _options(o: model.Options) -> wire.EphOptionsOut:
    return wire.EphOptionsOut(o.max_bytes, o.max_length, o.policy, o.ttl_seconds,
                           o.lease_seconds, o.retry_limit,
                           wire.EphWindowOut(o.window_ms, o.window_count))


@_answering
async def eph_queues(request: Request, tenant: str) -> Response:
    listed, cell_bytes = await broker_of(request).ephemeral.queues(tenant=tenant)
    return json_response(wire.EphQueuesAnswer([
        wire.EphListedQueue(q.queue, q.tier, q.depth, q.bytes, q.partitions, q.groups,
                         wire.EphDrops(**q.drops), _options(q.options)) for q in listed],
        len(listed), cell_bytes))


@_answering
async def eph_depth(request: Request, path: wire.EphQueuePath, query: wire.EphDepthQuery,
                    tenant: str) -> Response:
    d = await broker_of(request).ephemeral.depth(path.queue, given(query.group), tenant=tenant)
    return json_response(wire.EphDepthAnswer(
        d.queue, d.group, d.tier, d.pending, d.partitions_pending, d.bytes, d.partitions,
        d.groups))


def failure(message: str) -> Any:
    return wire.EphemeralFailure.bad_request(message)
