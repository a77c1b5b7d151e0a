"""The analytics family (`/api/v1/analytics/*`): time series in Queen's shapes, from the
history the broker keeps (core/upkeep/history.py; docs/operating/metrics.md, "History").

- `system-metrics`: per process (Queen's "replica"), its gauges per bucket: CPU, memory,
  pool, parked pops, spool. Each figure is `{avg, min, max, last}` over the minutes of the
  bucket (null where the broker keeps no such extreme).
- `worker-metrics`: the cluster per bucket (messages, requests, rates, acks, dead letters,
  database errors, latency), every process seen in the window (a restart is a new process
  beside the old one), per-queue lag and the window's totals.
- `queue-lag`: a bare array, per queue and bucket, newest first.
- `queue-ops`: per queue and bucket, throughput, acks, depth, lag, parked pops, partitions.
- `retention`: per bucket, messages released by retention (by rule) and evicted by
  maxWaitTimeSeconds.

Queen's figures the broker does not measure (event-loop lag, job queues, lag measured at
each pop, per-queue request counts, partition creations) are null, never a made-up 0.

Tenants (docs/security/tenants.md): the queue series are of the request's tenant, or of
every tenant for an operator naming none (`Tenancy.scope`; two tenants' queues of one name
are then two series). A named tenant's queue carries `tenant`, as on /metrics/prometheus. The per-process
figures (CPU, memory, pool, the cluster's counters) are the deployment's, shown to that
operator alone: a tenant's request gets no process and no cluster series (empty, and null
totals), as its /metrics scrape does.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.tenancy import Tenancy
from broker.wire.analytics import ProcessQuery, QueueLagPoint, QueueWindowQuery
from broker.wire.common import WindowQuery, given
from broker.wire.http import json_response
from core.timefmt import iso
from core.upkeep.history import (
    QUANTILES,
    Latency,
    ProcessBucket,
    ProcessSpan,
    QueueBucket,
    Window,
    add_up,
    bucket_minutes,
    counters_of,
    host_and_pid,
    per_second,
    timed,
)

_DEFAULT_SPAN = timedelta(hours=1)
Json = dict[str, Any]


def window_of(query: WindowQuery) -> Window:
    """`from`/`to`, by default the hour up to now; `from` after `to` is refused."""
    return Window(*query.closed(_DEFAULT_SPAN))


def _range(window: Window) -> Json:
    return {"from": iso(window.start), "to": iso(window.end)}


def _stat(avg: float | None, low: float | None, high: float | None,
          last: float | None) -> Json:
    return {"avg": None if avg is None else round(avg, 3), "min": low, "max": high,
            "last": last}


def _gauges(b: ProcessBucket) -> Json:
    return {
        "cpu": {"user_us": _stat(b.cpu_user_avg, b.cpu_user_min, b.cpu_user_max,
                                 b.cpu_user_last),
                "system_us": _stat(b.cpu_system_avg, b.cpu_system_min, b.cpu_system_max,
                                   b.cpu_system_last)},
        "memory": {"rss_bytes": _stat(b.rss_avg, b.rss_min, b.rss_max, b.rss_last)},
        "database": {
            "pool_size": _stat(b.pool_capacity, b.pool_capacity, b.pool_capacity,
                               b.pool_capacity),
            "pool_open": _stat(b.pool_open_avg, b.pool_open_min, b.pool_open_max,
                               b.pool_open_last),
            "pool_idle": _stat(b.pool_idle_avg, b.pool_idle_min, None, None),
            "pool_active": _stat(None, None, b.pool_active_max, None)},
        "parked": _stat(b.parked_avg, None, b.parked_max, b.parked_last),
        "spool": {"pending": _stat(None, None, b.spool_pending_max, b.spool_pending_last)},
    }


async def system_metrics(request: Request, query: ProcessQuery, tenancy: Tenancy) -> Response:
    window = window_of(query)
    rows: list[ProcessBucket] = []
    if tenancy.scope is not None:  # the processes are the deployment's
        width = bucket_minutes(window)
    else:
        width, rows = await broker_of(request).history.process_buckets(
            window, hostname=given(query.hostname), pid=given(query.workerId))
    by_process: dict[str, list[ProcessBucket]] = defaultdict(list)
    for row in rows:
        by_process[row.process].append(row)
    replicas = []
    for process, buckets in by_process.items():
        host, pid = host_and_pid(process)
        replicas.append({
            "hostname": host, "port": None, "workerId": pid, "pid": pid, "process": process,
            "role": buckets[0].role, "startedAt": iso(buckets[0].started_at),
            "timeSeries": [{"timestamp": iso(b.bucket), "sampleCount": b.flushes,
                            "minutes": b.minutes, "metrics": _gauges(b)} for b in buckets]})
    return json_response({"timeRange": _range(window), "replicas": replicas,
                          "replicaCount": len(replicas), "bucketMinutes": width,
                          "pointCount": len(rows)})


def _latency_json(figures: Latency) -> Json:
    return {"count": figures.count, "avgMs": figures.avg_ms,
            **{f"p{round(q * 100)}Ms": figures.quantiles_ms[q] for q in QUANTILES}}


def _throughput(counters: dict[str, int], width: int) -> Json:
    """Queen's figures of a worker-metrics point, from summed counters."""
    c = counters.get
    acked, failed = c("ack_messages", 0), c("ack_failed", 0)
    return {
        "pushMessages": c("push_messages", 0), "popMessages": c("pop_messages", 0),
        "ackMessages": acked, "pushRequests": c("push_requests", 0),
        "popRequests": c("pop_requests", 0), "ackRequests": c("ack_requests", 0),
        "jobsDone": c("requests", 0),
        "pushPerSecond": per_second(c("push_messages", 0), width),
        "popPerSecond": per_second(c("pop_messages", 0), width),
        "ackPerSecond": per_second(acked, width),
        "dbErrors": c("db_errors", 0), "ackSuccess": max(acked - failed, 0),
        "ackFailed": failed, "dlqCount": c("dlq", 0), "transactions": c("transactions", 0),
        "leasesExpired": c("leases_expired", 0),
        "latency": {kind: _latency_json(f) for kind, f in timed(counters).items()},
    }


# Queen's per-point figures this broker does not measure
_UNMEASURED = {"avgEventLoopLagMs": None, "maxEventLoopLagMs": None, "avgJobQueueSize": None,
               "maxJobQueueSize": None, "backoffSize": None, "avgLagMs": None,
               "maxLagMs": None, "lagCount": None}


async def worker_metrics(request: Request, query: ProcessQuery, tenancy: Tenancy) -> Response:
    broker = broker_of(request)
    window = window_of(query)
    host, pid = given(query.hostname), given(query.workerId)
    deployment = tenancy.scope is None  # the processes' figures are the operator's
    rows: list[ProcessBucket] = []
    spans: list[ProcessSpan] = []
    if deployment:
        width, rows = await broker.history.process_buckets(window, hostname=host, pid=pid)
        spans = [s for s in await broker.history.processes(window)
                 if (host is None or host_and_pid(s.process)[0] == host)
                 and (pid is None or host_and_pid(s.process)[1] == pid)]
    else:
        width = bucket_minutes(window)
    _, queue_rows = await broker.history.queue_buckets(window, tenant=tenancy.scope)
    by_bucket: dict[datetime, list[ProcessBucket]] = defaultdict(list)
    for row in rows:
        by_bucket[row.bucket].append(row)
    series = []
    for at in sorted(by_bucket, reverse=True):  # newest first, as Queen answers
        bucket = by_bucket[at]
        counters = add_up(counters_of(b.counters) for b in bucket)
        series.append({
            "timestamp": iso(at), **_throughput(counters, width), **_UNMEASURED,
            "avgFreeSlots": round(sum(b.pool_idle_avg for b in bucket), 3),
            "minFreeSlots": sum(b.pool_idle_min for b in bucket),
            "dbConnections": sum(b.pool_open_max for b in bucket),
            "processes": len(bucket)})
    workers = []
    for span in spans:
        hostname, worker_pid = host_and_pid(span.process)
        counted = counters_of(span.counters)
        workers.append({
            "hostname": hostname, "workerId": worker_pid, "pid": worker_pid,
            "process": span.process, "role": span.role, "startedAt": iso(span.started_at),
            "firstSeen": iso(span.first_minute), "lastSeen": iso(span.last_minute),
            "alive": span.alive, "freeSlots": span.pool_idle_min,
            "dbConnections": span.pool_open_max,
            "messagesProcessed": counted.get("push_messages", 0) + counted.get(
                "ack_messages", 0),
            "avgEventLoopLagMs": None, "maxEventLoopLagMs": None, "jobQueueSize": None,
            "backoffSize": None})
    total = add_up(counters_of(r.counters) for r in rows)
    c = total.get
    summary: Json = {
        "totalPushMessages": c("push_messages", 0), "totalPopMessages": c("pop_messages", 0),
        "totalAckMessages": c("ack_messages", 0), "totalPushRequests": c("push_requests", 0),
        "totalPopRequests": c("pop_requests", 0), "totalAckRequests": c("ack_requests", 0),
        "totalDbErrors": c("db_errors", 0), "totalAckFailed": c("ack_failed", 0),
        "totalDlq": c("dlq", 0), "processes": len(workers),
        "processStarts": sum(1 for s in spans if s.started_at >= window.start),
        "latency": {kind: _latency_json(f) for kind, f in timed(total).items()}}
    if not deployment:  # counted per process, not per tenant: not this tenant's to see
        summary = {key: None for key in summary}
    return json_response({
        "timeRange": _range(window), "bucketMinutes": width, "pointCount": len(series),
        "timeSeries": series, "workers": workers, "queues": _queue_lag_totals(queue_rows),
        "summary": summary,
    })


def _tenant_of(row: QueueBucket) -> Json:
    """`tenant` for a named tenant's queue; nothing for the default tenant's, so a
    deployment without tenants answers as before."""
    return {"tenant": row.tenant} if row.tenant else {}


def _queue_lag_totals(rows: list[QueueBucket]) -> list[Json]:
    """Per queue over the window: messages delivered, sampled lag (average, largest)."""
    by_queue: dict[tuple[str, str], list[QueueBucket]] = defaultdict(list)
    for row in rows:
        by_queue[(row.tenant, row.queue)].append(row)
    out = []
    for (_, name), buckets in by_queue.items():
        samples = sum(b.samples for b in buckets)
        out.append({
            "queueName": name, **_tenant_of(buckets[0]),
            "popCount": sum(b.delivered for b in buckets),
            "avgLagMs": round(sum(b.lag_avg * b.samples for b in buckets) / samples * 1000),
            "maxLagMs": round(max(b.lag_max for b in buckets) * 1000)})
    return sorted(out, key=lambda q: (-q["popCount"], q["queueName"], q.get("tenant", "")))


async def _queue_rows(request: Request, query: QueueWindowQuery, tenancy: Tenancy
                      ) -> tuple[Window, int, list[QueueBucket]]:
    window = window_of(query)
    width, rows = await broker_of(request).history.queue_buckets(
        window, tenant=tenancy.scope, queue=given(query.queue),
        namespace=given(query.namespace), task=given(query.task))
    return window, width, rows


async def queue_lag(request: Request, query: QueueWindowQuery, tenancy: Tenancy) -> Response:
    _, width, rows = await _queue_rows(request, query, tenancy)
    return json_response([
        QueueLagPoint(r.queue, r.delivered, round(r.lag_avg * 1000), round(r.lag_max * 1000),
                      width, iso(r.bucket), r.tenant or UNSET)
        for r in sorted(rows, key=lambda r: (-r.bucket.timestamp(), r.queue, r.tenant))])


async def queue_ops(request: Request, query: QueueWindowQuery, tenancy: Tenancy) -> Response:
    window, width, rows = await _queue_rows(request, query, tenancy)
    series = [{
        "bucket": iso(r.bucket), "queueName": r.queue, **_tenant_of(r),
        "pushRequests": None, "pushMessages": r.pushed, "popMessages": r.delivered,
        "popEmpty": None, "ackRequests": None,
        # acked counts messages cursors moved past, dead-lettered ones included
        "ackSuccess": max(r.acked - r.dead_lettered, 0), "ackFailed": r.failed,
        "transactions": None, "partitionsCreated": None, "partitionsDeleted": None,
        "partitionCount": r.partitions, "avgLagMs": round(r.lag_avg * 1000),
        "maxLagMs": round(r.lag_max * 1000), "pushPerSecond": per_second(r.pushed, width),
        "popPerSecond": per_second(r.delivered, width),
        "ackPerSecond": per_second(r.acked, width), "emptyPerSecond": None,
        "parkedCount": round(r.parked_avg, 2), "deadLettered": r.dead_lettered,
        "depth": r.depth, "evicted": r.evicted} for r in rows]
    return json_response({"timeRange": _range(window), "bucketMinutes": width,
                          "series": series, "queues": sorted({r.queue for r in rows})})


async def retention(request: Request, query: QueueWindowQuery, tenancy: Tenancy) -> Response:
    window, width, rows = await _queue_rows(request, query, tenancy)
    by_bucket: dict[datetime, list[QueueBucket]] = defaultdict(list)
    for row in rows:
        by_bucket[row.bucket].append(row)
    series = []
    for at in sorted(by_bucket):
        bucket = by_bucket[at]
        point = {"retentionMsgs": sum(b.retention_released for b in bucket),
                 "completedRetentionMsgs": sum(b.completed_released for b in bucket),
                 "evictionMsgs": sum(b.evicted for b in bucket),
                 "eventCount": sum(b.retention_segments for b in bucket)}
        point["totalMsgs"] = (point["retentionMsgs"] + point["completedRetentionMsgs"]
                              + point["evictionMsgs"])
        if any(point.values()):
            series.append({"bucket": iso(at), **point})
    keys = ("retentionMsgs", "completedRetentionMsgs", "evictionMsgs", "totalMsgs",
            "eventCount")
    return json_response({"timeRange": _range(window), "bucketMinutes": width,
                          "series": series,
                          "totals": {k: sum(p[k] for p in series) for k in keys}})
