"""Pop routes (§4.2–4.4): by queue, by queue and partition, and namespace/task discovery."""

from __future__ import annotations

import asyncio
import contextlib

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of, state_of
from broker.wire import framed_pop
from broker.wire.binary import FRAMED_POP_MEDIA_TYPE
from broker.wire.common import QueuePath, given
from broker.wire.http import json_response, no_content
from broker.wire.pop import Autopilot, PopAnswer, PopQuery, QueuePartitionPath
from broker.wire.pop_json import SplicedPopAnswer, messages_array, spliced
from core import tracing
from core.errors import BadRequest
from core.service import Broker
from core.types import (
    QUEUE_MODE,
    Pilot,
    PopRequest,
    PopResult,
    check_conflation,
    conflation_width,
)


def _pop_request(request: Request, query: PopQuery, *, tenant: str, queue: str | None,
                 partition: str | None, namespace: str | None = None,
                 task: str | None = None) -> tuple[PopRequest, Pilot | None]:
    settings = state_of(request).settings
    group = query.consumerGroup or QUEUE_MODE
    check_conflation(declared=query.conflation, group=group, auto_ack=query.autoAck)
    partitions = given(query.partitions)
    batch = query.batch or settings.default_batch_size
    # Autopilot (extensions §20.5): the broker replaces what the request omitted.
    pilot = Pilot(batch=given(query.batch) is None,
                  width=partitions is None) if query.autopilot else None
    return PopRequest(
        group=group, batch=batch, max_partitions=partitions or 1, queue=queue,
        partition=partition, namespace=namespace, task=task, auto_ack=query.autoAck,
        lease_seconds=query.leaseSeconds,
        subscription_mode=query.subscriptionMode or settings.default_subscription_mode,
        subscription_from=query.subscriptionFrom or "", conflation=query.conflation,
        conflation_width=conflation_width(partitions, batch), tenant=tenant,
        max_bytes=settings.pop_max_bytes), pilot


async def _serve_pop(request: Request, query: PopQuery,
                     asked: tuple[PopRequest, Pilot | None]) -> Response:
    timeout = given(query.timeout)
    timeout_ms = state_of(request).settings.default_timeout_ms if timeout is None else timeout
    broker = broker_of(request)
    gone = asyncio.Event()
    watcher = asyncio.create_task(_watch_disconnect(request, gone), name="pop-disconnect")
    asked_for, tracer = asked[0], broker.tracing
    try:
        # Without a tracer nothing is read for tracing at all (the pop's cost stays nil).
        with (tracer.receive(asked_for.queue, asked_for.group,
                             tracing.from_header(request.headers.get("traceparent")))
              if tracer.enabled else contextlib.nullcontext()) as span:
            served = await broker.serve_pop(*asked, wait=query.wait, timeout_ms=timeout_ms,
                                            gone=gone)
            if span is not None:
                tracer.delivered(span, [
                    tracing.of_message(m.frame.trace_id, m.frame.message_id)
                    for m in served.result.messages() if m.frame.trace_id is not None])
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    pop_request, result, conflating = served.request, served.result, served.conflating
    # A pop that declares conflation, or whose group conflates, never answers 204 (§20.4).
    if not result.claims and not (conflating or query.conflation):
        return no_content()
    echo = None if served.echo is None else Autopilot(
        served.echo.partitions, served.echo.batch, served.echo.wait_ms)
    if query.frames and result.claims and not (conflating or query.conflation):
        return _framed_answer(pop_request, result, echo)
    answer = _answer(pop_request, result, echo, broker)
    if conflating:
        answer.conflation = True
    elif query.conflation:
        answer.conflationConflict = True
    if not result.claims and broker.pops_paused:
        answer.paused = True
    return json_response(answer)


def _answer(pop_request: PopRequest, result: PopResult, echo: Autopilot | None,
            broker: Broker) -> SplicedPopAnswer:
    lease = result.lease_id or ""
    group = pop_request.group
    if result.claims:
        first = result.claims[0]
        answer = PopAnswer(
            success=True, queue=first.queue if pop_request.queue is not None else "",
            partition=first.partition, partitionId=str(first.partition_id), leaseId=lease,
            consumerGroup=group, messages=[], partitionsClaimed=result.partitions_claimed)
    else:  # nothing delivered, answered 200 all the same (a conflating pop, §20.4)
        answer = PopAnswer(success=True, queue=pop_request.queue or "", partition="",
                           partitionId="", leaseId="", consumerGroup=group, messages=[],
                           partitionsClaimed=0)
    if echo is not None:
        answer.autopilot = echo
    # The messages' JSON is spliced from their stored frames (broker/wire/pop_json.py); a
    # delivery whose acks may come back whole is remembered with the ids it delivered
    # (core/engine/ack_spans.py).
    txids: list[bytes] | None = [] if broker.remembers(pop_request, result) else None
    messages = messages_array(result, lease_id=lease, group=group, txids=txids)
    if txids is not None:
        broker.delivered(pop_request, result, txids)
    return spliced(answer, messages)


def _framed_answer(pop_request: PopRequest, result: PopResult,
                   echo: Autopilot | None) -> Response:
    """The same delivery as `_answer`, framed (§7.4): the stored segments as they are."""
    body = framed_pop.encode(
        queue=result.claims[0].queue if pop_request.queue is not None else "",
        lease_id=result.lease_id or "", group=pop_request.group,
        claims=framed_pop.stored_claims(result.claims),
        extras=None if echo is None else {"autopilot": echo})
    return Response(body, 200, media_type=FRAMED_POP_MEDIA_TYPE)


async def _watch_disconnect(request: Request, gone: asyncio.Event) -> None:
    """Set `gone` when the client disconnects, so a parked pop stops waiting for nobody."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return


async def pop_queue(request: Request, path: QueuePath, query: PopQuery,
                    tenant: str) -> Response:
    return await _serve_pop(request, query, _pop_request(
        request, query, tenant=tenant, queue=path.queue, partition=None))


async def pop_partition(request: Request, path: QueuePartitionPath, query: PopQuery,
                        tenant: str) -> Response:
    return await _serve_pop(request, query, _pop_request(
        request, query, tenant=tenant, queue=path.queue, partition=path.partition))


async def pop_discovery(request: Request, query: PopQuery, tenant: str) -> Response:
    namespace, task = given(query.namespace), given(query.task)
    if namespace is None and task is None:
        raise BadRequest("namespace or task is required")
    return await _serve_pop(request, query, _pop_request(
        request, query, tenant=tenant, queue=None, partition=None, namespace=namespace,
        task=task))
