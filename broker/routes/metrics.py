"""`GET /metrics` (JSON) and `GET /metrics/prometheus` (text exposition format), §6.5.

Counters are the cluster's: every web worker counts in memory and flushes its deltas to
PostgreSQL every METRICS_FLUSH_MS (`core/upkeep/stats.py`); a scrape first flushes the answering
worker's own, so what it did itself is always in, and another worker's counts are at most
one flush interval behind. Why not prometheus-client's multiprocess mode: its files sum
only the workers of one host, vanish with the data directory, and would be a second
aggregation beside the one the analytics need anyway; the table sums every worker of every
broker on the database and survives restarts (docs/operating/metrics.md).

Both are the deployment's figures for an operator's request that names no tenant (an
anonymous scrape of a skipped path is one); a request of a tenant (its token's claim, a
trusted proxy's header, an operator naming it) gets that tenant's queue figures only
(docs/security/tenants.md).
"""

from __future__ import annotations

import os
import resource
import time

from starlette.requests import Request
from starlette.responses import Response

from broker import prometheus
from broker.state import broker_of
from broker.tenancy import Tenancy
from broker.wire.http import json_response
from core.ephemeral.service import Totals as EphemeralTotals
from core.errors import ServiceError
from core.service import Broker
from core.upkeep.stats import (
    ClusterFigures,
    ProcessFigures,
    open_files,
    resident_memory_bytes,
)

_STARTED = time.monotonic()  # per worker process; module import happens at app start


def _local(broker: Broker) -> ProcessFigures:
    pool = broker.pool_stats()
    assert broker.flusher is not None
    uptime = time.monotonic() - _STARTED
    files, max_files = open_files()
    return ProcessFigures(
        process=broker.flusher.process, uptime_seconds=uptime, role=broker.flusher.role,
        started_at=time.time() - uptime, pool_size=pool.size, pool_idle=pool.idle, pool_max=pool.max_size,
        rss_bytes=resident_memory_bytes(), open_files=files, max_open_files=max_files)


async def _figures(broker: Broker, tenant: str | None) -> ClusterFigures | None:
    """The cluster's figures, or None when the database cannot be read: the metrics routes
    answer what this process knows rather than an error."""
    try:
        return await broker.cluster_figures(tenant=tenant)
    except ServiceError:
        return None


async def _ephemeral(broker: Broker, tenant: str | None) -> EphemeralTotals | None:
    try:
        return await broker.ephemeral.totals(tenant=tenant)
    except ServiceError:
        return None


async def _tenant_metrics(broker: Broker, tenant: str) -> Response:
    """One tenant's figures: its queues, leases, dead letters, timers and ephemeral queues
    (nothing of the processes or of other tenants)."""
    cluster = await _figures(broker, tenant)
    eph = await _ephemeral(broker, tenant)
    row = cluster.overview if cluster is not None else None
    return json_response({
        "tenant": tenant,
        "messages": {"total": row.appended if row else None,
                     "retained": row.retained if row else None},
        "queues": row.queues if row else None, "partitions": row.partitions if row else None,
        "activeLeases": row.live_leases if row else None,
        "deadLetters": row.dead_letters if row else None,
        "timers": {"pending": cluster.timers_pending if cluster else None},
        "ephemeral": None if eph is None else {
            "queues": eph.queues, "messages": eph.depth, "bytes": eph.bytes,
            "drops": {"bounds": eph.drops_bounds, "ttl": eph.drops_ttl,
                      "retry": eph.drops_retry}},
        "database": {"healthy": cluster is not None}})


async def metrics(request: Request, tenancy: Tenancy) -> Response:
    broker = broker_of(request)
    tenant = tenancy.scope
    if tenant is not None:
        return await _tenant_metrics(broker, tenant)
    cluster = await _figures(broker, None)
    eph = await _ephemeral(broker, None)
    row = cluster.overview if cluster is not None else None
    local = _local(broker)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    assert broker.flusher is not None
    request_rate, message_rate = broker.flusher.rates()
    counters = cluster.counters if cluster is not None else {}
    answer = {
        "uptime": round(local.uptime_seconds, 3),
        "requests": {"total": counters.get("requests") if cluster else None,
                     "rate": request_rate},
        "messages": {"total": row.appended if row else None,
                     "pushed": counters.get("push_messages", 0) if cluster else None,
                     "delivered": counters.get("pop_messages", 0) if cluster else None,
                     "acked": counters.get("ack_messages", 0) if cluster else None,
                     "retained": row.retained if row else None, "rate": message_rate},
        "database": {"poolSize": local.pool_size, "idleConnections": local.pool_idle,
                     "waitingRequests": 0, "maxSize": local.pool_max,
                     "healthy": cluster is not None},
        "memory": {"rssBytes": local.rss_bytes, "maxRssKb": usage.ru_maxrss},
        "cpu": {"userSeconds": usage.ru_utime, "systemSeconds": usage.ru_stime},
        "workers": len(cluster.processes) if cluster else None,
        "kv": {name: counters.get(key, 0) if cluster else None for name, key in (
            ("ops", "kv_ops"), ("writes", "kv_writes"), ("reads", "kv_reads"))},
        "locks": {name: counters.get(key, 0) if cluster else None for name, key in (
            ("grants", "lock_grants"), ("refusals", "lock_refusals"))},
        "pid": os.getpid(),
        "ephemeral": None if eph is None else {
            "queues": eph.queues, "messages": eph.depth, "bytes": eph.bytes,
            "drops": {"bounds": eph.drops_bounds, "ttl": eph.drops_ttl,
                      "retry": eph.drops_retry},
            "parkedPops": broker.ephemeral.waiters.parked_count},
    }
    if cluster is not None:
        lags = counters.get("timer_lag_seconds_count", 0)
        answer["timers"] = {
            "pending": cluster.timers_pending,
            "scheduled": counters.get("timers_scheduled", 0),
            "cancelled": counters.get("timers_cancelled", 0),
            "fired": counters.get("timers_fired", 0),
            "fireFailed": counters.get("timers_fire_failed", 0),
            "deadLettered": counters.get("timers_dead_lettered", 0),
            "fireLagSecondsMean": round(counters.get("timer_lag_seconds_sum_us", 0) / lags
                                        / 1e6, 6) if lags else None}
    if row is not None:
        answer.update({"queues": row.queues, "partitions": row.partitions,
                       "activeLeases": row.live_leases, "deadLetters": row.dead_letters})
    return json_response(answer)


async def prometheus_text(request: Request, tenancy: Tenancy) -> Response:
    broker = broker_of(request)
    tenant = tenancy.scope
    scrape = prometheus.Scrape(await _figures(broker, tenant), _local(broker),
                               broker.figures_provider(), await _ephemeral(broker, tenant),
                               tenant)
    return Response(prometheus.exposition(scrape), media_type=prometheus.MEDIA_TYPE)
