"""The Prometheus exposition of `/metrics/prometheus`, built with `prometheus-client`.

The figures are the cluster's (`core.upkeep.stats.ClusterFigures`: every worker's flushed counters
summed in PostgreSQL, live workers' heartbeats, per-queue gauges), turned into metric
families by a one-shot collector on a fresh registry per scrape. Names follow Queen's
(`queen_cluster_*_total`, `queen_dlq_depth`, ...), so its documented alert rules work;
the latency histograms (`queen_{push,pop,ack}_duration_seconds`) are ours.

Per-queue series carry a `tenant` label for a queue of a named tenant (docs/security/
tenants.md) and none for the default tenant's: in Prometheus an empty label and a missing
one are the same, so a deployment without tenants exposes exactly the series it did. A
scrape scoped to one tenant (a tenant's token, when /metrics/prometheus is not a skipped
path) shows that tenant's queue figures only: no process, cluster or other tenant's series.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from core.counters import LATENCY_BOUNDS, TIMED, bucket_name
from core.ephemeral.service import Totals as EphemeralTotals
from core.upkeep.stats import ClusterFigures, OperatingFigures, ProcessFigures

MEDIA_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # the format wire-protocol §6.5 names

# Counters of core.counters by the metric's name after `queen_` (and before `_total`), with
# its help: the counter's name is the metric's without `cluster_`.
_CLUSTER_COUNTERS = {
    "cluster_requests": "HTTP requests answered.",
    "cluster_push_requests": "Push requests answered.",
    "cluster_push_messages": "Messages appended (pushes and transactions; duplicates not counted).",
    "cluster_pop_requests": "Pop requests answered.",
    "cluster_pop_messages": "Messages delivered by pops.",
    "cluster_ack_requests": "Ack and batch-ack requests answered.",
    "cluster_ack_messages":
        "Acks applied (any status; repeated acks of committed messages not counted).",
    "cluster_ack_failed": "Acks applied with a failed/retry/dlq status.",
    "cluster_transactions": "Transactions committed.",
    "cluster_dlq": "Messages moved to the dead-letter store by acks.",
    "cluster_db_errors": "Database errors met by web workers.",
    "cluster_spool_rejected":
        "Spooled records the database refused for good, set aside in the spool directory's "
        "*.rejected files.",
    "cluster_commit_probes":
        "Commit probes: a push failed as an outage and the broker asked whether the database "
        "still commits (a stalled partition, or a database that does not).",
    # Operating signals (docs/operating/alerts.md): leases the reaper released on expiry (a
    # consumer neither acked nor extended in time), and processes that started (web workers,
    # reapers, Kafka listeners: an increase after the first scrape is a restart).
    "leases_expired": "Leases the reaper released because they expired before an ack or extension.",
    "process_starts": "Broker processes (web workers, reapers, Kafka listeners) that started.",
    # The read path's ready set (core/engine/ready): claim statements, those that delivered
    # nothing, and reseed statements (the paged scan of a queue for a group).
    "cluster_claim_statements": "Pop claim statements sent.",
    "cluster_claim_statements_empty": "Pop claim statements that delivered nothing.",
    "cluster_ready_reseed_statements":
        "Ready-set reseed statements (pages of a queue's partitions).",
    # KV store and locks (extensions §14, §15)
    "cluster_kv_ops":
        "KV operations received (KV calls, lock steps and committed transaction riders).",
    "cluster_kv_writes": "KV writes applied.",
    "cluster_kv_reads": "KV reads answered (get, getMany, getPrefix).",
    "cluster_lock_grants": "Lock and semaphore acquires granted.",
    "cluster_lock_refusals": "Lock and semaphore acquires refused (held or contended).",
    # Timers (core/timers): counted by the web workers (scheduled, cancelled) and by the
    # timer firer (fired, failed fires, dead-lettered).
    "timers_scheduled": "Timers scheduled or rescheduled.",
    "timers_cancelled": "Pending timers cancelled.",
    "timers_fired": "Timers fired (their message appended).",
    "timers_fire_failed": "Timer fires that failed for good and were backed off.",
    "timers_dead_lettered": "Timers moved to the dead-letter store after their last failed fire.",
}
_OVERVIEW_GAUGES = (
    ("queen_queues", "Queues.", "queues"),
    ("queen_partitions", "Partitions.", "partitions"),
    ("queen_messages_appended", "Messages ever appended (sum of high watermarks).", "appended"),
    ("queen_messages_retained", "Messages currently retained.", "retained"),
    ("queen_segments", "Stored segments.", "segments"),
    ("queen_consumer_cursors", "Consumer cursors (partition, group).", "cursors"),
    ("queen_leases_active", "Live leases.", "live_leases"),
)


@dataclass(frozen=True, slots=True)
class Scrape:
    """Everything one scrape shows. `cluster` is None when the database could not be read:
    the local gauges still answer, and `queen_file_buffer_db_healthy` says why the rest is
    missing."""

    cluster: ClusterFigures | None
    local: ProcessFigures  # this worker, for when the cluster view is missing
    operating: OperatingFigures
    ephemeral: EphemeralTotals | None = None  # ephemeral queues (§19), deployment-wide
    tenant: str | None = None  # the one tenant this scrape is scoped to (None: every one)


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


def _labelled(name: str, text: str, label: str,
              values: Iterable[tuple[str, float]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=[label])
    for key, value in values:
        family.add_metric([key], value)
    return family


def _per_queue(name: str, text: str,
               values: Iterable[tuple[tuple[str, str], float]]) -> GaugeMetricFamily:
    """A per-queue family: label `queue`, and `tenant` for a named tenant's queue (see the
    module docstring)."""
    family = GaugeMetricFamily(name, text, labels=["queue"])
    for (tenant, queue), value in values:
        family.add_sample(name, {"queue": queue, "tenant": tenant} if tenant
                          else {"queue": queue}, value)
    return family


def _histogram(kind: str, counters: dict[str, int], name: str | None = None,
               text: str | None = None) -> HistogramMetricFamily:
    buckets: list[tuple[str, float]] = []
    running = 0
    for index, bound in enumerate((*LATENCY_BOUNDS, float("inf"))):
        running += counters.get(bucket_name(kind, index), 0)
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
    return HistogramMetricFamily(
        name or f"queen_{kind}_duration_seconds",
        text or f"Time to answer a {kind} request (a pop's includes its long-poll wait).",
        buckets=buckets, sum_value=counters.get(f"{kind}_seconds_sum_us", 0) / 1_000_000)


def _families(scrape: Scrape) -> Iterator[Metric]:
    if scrape.tenant is not None:
        yield from _tenant_families(scrape)
        return
    processes = scrape.cluster.processes if scrape.cluster else []
    if not any(p.process == scrape.local.process for p in processes):
        processes = [*processes, scrape.local]
    yield _gauge("queen_uptime_seconds", "Seconds since the oldest live web worker started.",
                 max(p.uptime_seconds for p in processes))
    yield _gauge("queen_db_pool_size", "Pool capacity (DB_POOL_SIZE) summed over web workers.",
                 sum(p.pool_max for p in processes))
    yield _gauge("queen_db_pool_active", "Pool connections in use, over web workers.",
                 sum(p.pool_size - p.pool_idle for p in processes))
    yield _gauge("queen_db_pool_idle", "Open idle pool connections, over web workers.",
                 sum(p.pool_idle for p in processes))
    yield _labelled("queen_process_resident_memory_bytes", "Resident memory of each web worker.",
                    "process", ((p.process, p.rss_bytes) for p in processes))
    yield _labelled("queen_process_open_fds", "Files (connections among them) each web "
                    "worker holds open.", "process",
                    ((p.process, p.open_files) for p in processes))
    yield _labelled("queen_process_max_fds", "Files each web worker may hold open (its soft "
                    "limit).", "process",
                    ((p.process, p.max_open_files) for p in processes if p.max_open_files))
    starts = GaugeMetricFamily("queen_process_start_time_seconds",
                               "Start of each live broker process, in Unix seconds.",
                               labels=["process", "role"])
    for p in processes:
        starts.add_metric([p.process, p.role], p.started_at)
    yield starts
    op = scrape.operating
    yield _gauge("queen_maintenance_mode_enabled", "1 while pushes go to the spool.",
                 int(op.maintenance or any(p.maintenance for p in processes)))
    # Every worker of a host counts the same spool (core/engine/spool.py: one per database per
    # host), so the largest count is the host's, not their sum.
    yield _gauge("queen_file_buffer_pending", "Pushes waiting in the spool.",
                 max([p.file_buffer_pending for p in processes] + [op.file_buffer_pending]))
    yield _gauge("queen_file_buffer_failed",
                 "Pushed records the spool could not take (full or unwritable), answered "
                 "with an error, since each process started.",
                 max(sum(p.file_buffer_failed for p in processes), op.file_buffer_failed))
    yield _gauge("queen_file_buffer_db_healthy", "1 when this scrape could read the database.",
                 int(scrape.cluster is not None))
    cluster = scrape.cluster
    if cluster is None:
        return
    for suffix, text in _CLUSTER_COUNTERS.items():
        yield CounterMetricFamily(f"queen_{suffix}", text,
                                  value=cluster.counters.get(suffix.removeprefix("cluster_"), 0))
    for kind in TIMED:
        yield _histogram(kind, cluster.counters)
    yield _histogram("timer_lag", cluster.counters, "queen_timer_fire_lag_seconds",
                     "How long after its deliverAt a timer fired.")
    yield from _queue_families(cluster)
    yield from _replication(cluster)
    eph = scrape.ephemeral
    if eph is not None:
        yield _gauge("queen_ephemeral_queues", "Ephemeral queues, live or declared.", eph.queues)
        yield _gauge("queen_ephemeral_messages", "Messages held by ephemeral queues.", eph.depth)
        yield _gauge("queen_ephemeral_bytes", "Payload bytes held by ephemeral queues "
                     "(bounded by EPHEMERAL_MAX_BYTES).", eph.bytes)
        yield _labelled("queen_ephemeral_drops", "Messages ephemeral queues dropped, by "
                        "reason, as their live counters say (a deleted, collected or "
                        "crash-emptied queue takes its counts with it).", "reason",
                        (("bounds", eph.drops_bounds), ("ttl", eph.drops_ttl),
                         ("retry", eph.drops_retry)))


def _queue_families(cluster: ClusterFigures) -> Iterator[Metric]:
    """The figures of the queues the scrape covers (every tenant's, or one tenant's)."""
    yield _gauge("queen_timers_pending", "Timers scheduled and not yet fired.",
                 cluster.timers_pending)
    yield _gauge("queen_dlq_depth", "Rows in the dead-letter store.",
                 sum(q.dead_letters for q in cluster.queues))
    yield _per_queue("queen_dlq_depth_by_queue", "Dead letters per queue.",
                     (((q.tenant, q.name), q.dead_letters) for q in cluster.queues))
    yield _per_queue("queen_queue_pop_lag_milliseconds",
                     "Age of the oldest message the slowest cursor has not consumed.",
                     (((q.tenant, q.name), q.lag_ms) for q in cluster.queues))
    yield _per_queue("queen_queue_parked_consumers",
                     "Long-poll pops parked per queue (* = any queue: discovery pops, and pops "
                     "before their first check).", cluster.parked.items())
    for name, text, attr in _OVERVIEW_GAUGES:
        yield _gauge(name, text, getattr(cluster.overview, attr))


def _tenant_families(scrape: Scrape) -> Iterator[Metric]:
    """A scrape scoped to one tenant: its queues' figures, and whether the database could
    be read."""
    yield _gauge("queen_file_buffer_db_healthy", "1 when this scrape could read the database.",
                 int(scrape.cluster is not None))
    if scrape.cluster is not None:
        yield from _queue_families(scrape.cluster)


def _replication(cluster: ClusterFigures) -> Iterator[Metric]:
    """The standbys streaming from the database (an HA pair: docs/deploying/high-availability.md)."""
    yield _gauge("queen_db_replication_standbys",
                 "Standbys streaming from the database server (pg_stat_replication).",
                 len(cluster.standbys))
    yield _labelled("queen_db_replication_sync", "1 for a synchronous standby, 0 otherwise.",
                    "standby", ((s.standby, int(s.sync_state in ("sync", "quorum")))
                                for s in cluster.standbys))
    yield _labelled("queen_db_replication_lag_bytes",
                    "WAL the standby has not replayed yet, in bytes (absent when the database "
                    "user may not read WAL positions: grant pg_monitor).", "standby",
                    ((s.standby, s.lag_bytes) for s in cluster.standbys
                     if s.lag_bytes is not None))
    yield _labelled("queen_db_replication_lag_seconds",
                    "How long ago the standby replayed what the server had then written "
                    "(PostgreSQL's replay_lag; 0 once caught up).", "standby",
                    ((s.standby, s.lag_seconds) for s in cluster.standbys))


class _OneScrape:
    def __init__(self, scrape: Scrape) -> None:
        self._scrape = scrape

    def collect(self) -> Iterator[Metric]:
        return _families(self._scrape)


def exposition(scrape: Scrape) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_OneScrape(scrape))
    return generate_latest(registry)
