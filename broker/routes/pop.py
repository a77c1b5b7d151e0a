"""Pop routes (§4.2–4.4): by queue, by queue and partition, and namespace/task discovery."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.state import state_of
from broker.wire import check_name, json_response, no_content, query_bool, query_int
from core.longpoll import Backoff, pop_or_wait
from core.pop import QUEUE_MODE, PopRequest, PopResult, requested_seed
from core.timefmt import iso

AUTOPILOT_BATCH = 100
AUTOPILOT_WAIT_MS = 100
MAX_BATCH = 10000
MAX_PARTITIONS = 1000
MAX_TIMEOUT_MS = 3_600_000


class WireMessage(msgspec.Struct):
    """One delivered message, keys in the order of §3."""

    id: str
    transactionId: str
    traceId: str | None
    data: msgspec.Raw
    producerSub: str | None
    createdAt: str
    partitionId: str
    partition: str
    leaseId: str
    consumerGroup: str


def _pop_request(request: Request, *, queue: str | None, partition: str | None,
                 namespace: str | None = None, task: str | None = None) -> tuple[PopRequest, bool]:
    state = state_of(request)
    params = request.query_params
    autopilot = query_bool(request, "autopilot", False)
    default_batch = AUTOPILOT_BATCH if autopilot else state.settings.default_batch_size
    batch = query_int(request, "batch", default_batch, low=1, high=MAX_BATCH)
    partitions = query_int(request, "partitions", 1, low=1, high=MAX_PARTITIONS)
    group = params.get("consumerGroup") or QUEUE_MODE
    check_name(group, "consumerGroup")
    mode = params.get("subscriptionMode") or state.settings.default_subscription_mode
    since = params.get("subscriptionFrom") or ""
    check_name(mode, "subscriptionMode")
    requested_seed(mode, since)  # rejects a malformed timestamp before anything happens
    return PopRequest(
        group=group, batch=batch, max_partitions=partitions, queue=queue, partition=partition,
        namespace=namespace, task=task, auto_ack=query_bool(request, "autoAck", False),
        lease_seconds=query_int(request, "leaseSeconds", 0, low=0, high=MAX_TIMEOUT_MS // 1000),
        subscription_mode=mode, subscription_from=since), autopilot


async def _serve_pop(request: Request, pop_request: PopRequest, autopilot: bool) -> Response:
    state = state_of(request)
    wait = query_bool(request, "wait", False)
    timeout_ms = query_int(request, "timeout", state.settings.default_timeout_ms, low=0,
                           high=MAX_TIMEOUT_MS)
    settings = state.settings
    backoff = Backoff(settings.pop_wait_initial_interval_ms, settings.pop_wait_backoff_threshold,
                      settings.pop_wait_backoff_multiplier, settings.pop_wait_max_interval_ms)
    gone = asyncio.Event()
    watcher = asyncio.create_task(_watch_disconnect(request, gone), name="pop-disconnect")
    try:
        result = await pop_or_wait(state.db, state.hub, pop_request, wait=wait,
                                   timeout_ms=timeout_ms, backoff=backoff, gone=gone,
                                   stop_waiting=state.draining)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    if not result.messages:
        return no_content()
    return json_response(_answer(pop_request, result, autopilot))


def _answer(pop_request: PopRequest, result: PopResult, autopilot: bool) -> dict[str, Any]:
    lease = result.lease_id or ""
    group = pop_request.group
    messages = [WireMessage(
        id=str(m.frame.message_id), transactionId=m.frame.transaction_id,
        traceId=str(m.frame.trace_id) if m.frame.trace_id else None,
        data=msgspec.Raw(m.frame.payload), producerSub=m.frame.producer_sub,
        createdAt=iso(m.created_at), partitionId=str(m.partition_id), partition=m.partition,
        leaseId=lease, consumerGroup=group) for m in result.messages]
    first = result.messages[0]
    answer: dict[str, Any] = {
        "success": True,
        "queue": first.queue if pop_request.queue is not None else "",
        "partition": first.partition,
        "partitionId": str(first.partition_id),
        "leaseId": lease,
        "consumerGroup": group,
        "messages": messages,
        "partitionsClaimed": result.partitions_claimed,
    }
    if autopilot:
        answer["autopilot"] = {"partitions": pop_request.max_partitions,
                               "batch": pop_request.batch, "waitMs": AUTOPILOT_WAIT_MS}
    return answer


async def _watch_disconnect(request: Request, gone: asyncio.Event) -> None:
    """Set `gone` when the client disconnects, so a parked pop stops waiting for nobody."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return


async def pop_queue(request: Request) -> Response:
    queue = check_name(request.path_params["queue"], "queue")
    pop_request, autopilot = _pop_request(request, queue=queue, partition=None)
    return await _serve_pop(request, pop_request, autopilot)


async def pop_partition(request: Request) -> Response:
    queue = check_name(request.path_params["queue"], "queue")
    partition = check_name(request.path_params["partition"], "partition")
    pop_request, autopilot = _pop_request(request, queue=queue, partition=partition)
    return await _serve_pop(request, pop_request, autopilot)


async def pop_discovery(request: Request) -> Response:
    namespace = request.query_params.get("namespace") or None
    task = request.query_params.get("task") or None
    if namespace is None and task is None:
        return json_response({"success": False, "error": "namespace or task is required",
                              "messages": []}, 400)
    if namespace is not None:
        check_name(namespace, "namespace")
    if task is not None:
        check_name(task, "task")
    pop_request, autopilot = _pop_request(request, queue=None, partition=None,
                                          namespace=namespace, task=task)
    return await _serve_pop(request, pop_request, autopilot)


routes = [
    Route("/api/v1/pop/queue/{queue}/partition/{partition}", pop_partition, methods=["GET"]),
    Route("/api/v1/pop/queue/{queue}", pop_queue, methods=["GET"]),
    Route("/api/v1/pop", pop_discovery, methods=["GET"]),
]
