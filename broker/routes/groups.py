"""Consumer-group routes (§6.1): list, lagging, detail, delete, seek, subscription."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.state import state_of
from broker.wire import check_name, decode_object, json_response, query_bool, query_int, read_body
from core import groups
from core.errors import BadRequest
from core.timefmt import iso, parse_iso

DEFAULT_MIN_LAG_SECONDS = 3600


def _group(request: Request) -> str:
    return check_name(request.path_params["group"], "consumer group", allow_empty=False)


def _queue(request: Request) -> str:
    return check_name(request.path_params["queue"], "queue")


def _iso_or_none(ts: datetime | None) -> str | None:
    return iso(ts) if ts is not None else None


async def list_groups(request: Request) -> Response:
    state = state_of(request)
    now = datetime.now(UTC)
    out = []
    for s in await groups.summaries(state.db):
        out.append({
            "name": s.name, "topics": [s.queue], "queueName": s.queue,
            "members": len(s.members), "partitionsWithLag": s.partitions_with_lag,
            # §6.1 lists totalLag as null; the offset backlog travels as offsetLag instead.
            "totalLag": None, "offsetLag": s.offset_lag,
            "maxTimeLag": round(s.max_time_lag, 3), "state": s.state(now),
            "subscriptionMode": s.subscription_mode,
            "subscriptionTimestamp": _iso_or_none(s.subscription_timestamp),
            "subscriptionCreatedAt": _iso_or_none(s.subscription_created_at),
        })
    return json_response(out)


async def lagging(request: Request) -> Response:
    state = state_of(request)
    min_lag = query_int(request, "minLagSeconds", DEFAULT_MIN_LAG_SECONDS)
    out = []
    for c in await groups.cursors(state.db):
        if c["offset_lag"] <= 0 or c["time_lag_seconds"] <= min_lag:
            continue
        out.append({
            "consumer_group": c["consumer_group"], "queue_name": c["queue"],
            "partition_name": c["partition"], "partition_id": str(c["partition_id"]),
            "worker_id": c["worker_id"] if c["lease_active"] else None,
            "offset_lag": c["offset_lag"], "time_lag_seconds": int(c["time_lag_seconds"]),
            "lag_hours": round(c["time_lag_seconds"] / 3600, 2),
            "oldest_unconsumed_at": _iso_or_none(c["oldest_unconsumed_at"]),
            "last_consumed_at": _iso_or_none(c["last_consumed_at"]),
        })
    out.sort(key=lambda e: -e["time_lag_seconds"])
    return json_response(out)


async def group_detail(request: Request) -> Response:
    state = state_of(request)
    by_queue: dict[str, Any] = {}
    for c in await groups.cursors(state.db, group=_group(request)):
        by_queue.setdefault(c["queue"], {"partitions": []})["partitions"].append({
            "partition": c["partition"], "partitionId": str(c["partition_id"]),
            "workerId": c["worker_id"] if c["lease_active"] else None,
            "lastConsumedAt": _iso_or_none(c["last_consumed_at"]),
            "totalConsumed": c["total_consumed"], "committedOffset": c["committed"],
            "offsetLag": c["offset_lag"], "timeLagSeconds": int(c["time_lag_seconds"]),
            "leaseActive": c["lease_active"],
        })
    return json_response(by_queue)


async def delete_group(request: Request) -> Response:
    state = state_of(request)
    group = _group(request)
    metadata = query_bool(request, "deleteMetadata", True)
    cursors, subs = await groups.delete_group(state.db, group, queue=None,
                                              delete_metadata=metadata)
    return json_response({"success": True, "consumerGroup": group,
                          "deletedPartitions": cursors, "metadataDeleted": metadata,
                          "subscriptionsDeleted": subs})


async def delete_group_for_queue(request: Request) -> Response:
    state = state_of(request)
    group, queue = _group(request), _queue(request)
    metadata = query_bool(request, "deleteMetadata", True)
    cursors, subs = await groups.delete_group(state.db, group, queue=queue,
                                              delete_metadata=metadata)
    return json_response({"success": True, "consumerGroup": group, "queueName": queue,
                          "deletedPartitions": cursors, "metadataDeleted": metadata,
                          "subscriptionsDeleted": subs})


def _seek_target(body: dict[str, Any], *, empty_means_end: bool) -> datetime | None:
    """None = to the end; else the timestamp. Neither given is a 400 (queue-wide seek)."""
    to_end = body.get("toEnd")
    if to_end is not None and not isinstance(to_end, bool):
        raise BadRequest("toEnd must be a boolean")
    ts = body.get("timestamp")
    if to_end:
        return None
    if ts is None or ts == "":
        if empty_means_end and to_end is None:
            return None
        raise BadRequest('seek needs {"toEnd": true} or {"timestamp": "<ISO-8601>"}')
    if not isinstance(ts, str):
        raise BadRequest("timestamp must be an ISO-8601 string")
    return parse_iso(ts, "timestamp")


async def seek_queue(request: Request) -> Response:
    state = state_of(request)
    group, queue = _group(request), _queue(request)
    body = decode_object(await read_body(request, state.settings.max_body_bytes))
    target = _seek_target(body, empty_means_end=False)
    result = await groups.seek(state.db, group, queue, partition=None, timestamp=target)
    return json_response({"success": True, "consumerGroup": group, "queueName": queue,
                          "seekToEnd": target is None,
                          "targetTimestamp": _iso_or_none(target),
                          "partitionsUpdated": len(result.cursors)})


async def seek_partition(request: Request) -> Response:
    state = state_of(request)
    group, queue = _group(request), _queue(request)
    partition = check_name(request.path_params["partition"], "partition")
    body = decode_object(await read_body(request, state.settings.max_body_bytes))
    target = _seek_target(body, empty_means_end=True)
    result = await groups.seek(state.db, group, queue, partition=partition, timestamp=target)
    return json_response({"success": True, "consumerGroup": group, "queueName": queue,
                          "partitionName": partition, "updated": len(result.cursors) > 0,
                          "cursorMovedTo": result.cursors[0][1] if result.cursors else None,
                          "seekToEnd": target is None,
                          "targetTimestamp": _iso_or_none(target)})


async def subscription(request: Request) -> Response:
    state = state_of(request)
    group = _group(request)
    body = decode_object(await read_body(request, state.settings.max_body_bytes))
    raw = body.get("subscriptionTimestamp")
    if not isinstance(raw, str) or not raw:
        raise BadRequest("subscriptionTimestamp (ISO-8601) is required")
    ts = parse_iso(raw, "subscriptionTimestamp")
    updated = await groups.set_subscription_timestamp(state.db, group, ts)
    return json_response({"success": True, "consumerGroup": group, "newTimestamp": iso(ts),
                          "rowsUpdated": updated})


_BASE = "/api/v1/consumer-groups"
routes = [
    Route(_BASE, list_groups, methods=["GET"]),
    Route(_BASE + "/lagging", lagging, methods=["GET"]),
    Route(_BASE + "/{group}/subscription", subscription, methods=["POST"]),
    Route(_BASE + "/{group}/queues/{queue}/partitions/{partition}/seek", seek_partition,
          methods=["POST"]),
    Route(_BASE + "/{group}/queues/{queue}/seek", seek_queue, methods=["POST"]),
    Route(_BASE + "/{group}/queues/{queue}", delete_group_for_queue, methods=["DELETE"]),
    Route(_BASE + "/{group}", group_detail, methods=["GET"]),
    Route(_BASE + "/{group}", delete_group, methods=["DELETE"]),
]
