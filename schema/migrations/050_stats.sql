-- Version 50: observability. Counters the web workers flush, the heartbeat of each process,
-- and the samples the reaper takes for the analytics series (docs/operating/metrics.md).
--
-- Nothing here is written on the hot path: workers count in memory and add their deltas
-- every METRICS_FLUSH_MS in one statement on a connection of their own; the reaper samples
-- every STATS_SAMPLE_INTERVAL_MS.

-- Cumulative counters: cluster-wide ones under partition_id 0 (requests, messages, latency
-- histogram buckets), per-partition ones (delivered, failed) under the partition's id.
CREATE TABLE queen.stats_counters (
    partition_id bigint NOT NULL,
    name         text NOT NULL,
    value        bigint NOT NULL,
    PRIMARY KEY (partition_id, name)
);

-- One row per live web worker (host:pid), refreshed by every flush: pool, memory, parked
-- long polls per queue, and the figures of the maintenance/spool provider. Rows not seen
-- for a while are dropped by the reaper.
CREATE TABLE queen.stats_processes (
    process    text PRIMARY KEY,
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL,
    figures    jsonb NOT NULL
);

-- Per queue, the cumulative counters of the last sample, so the next one stores deltas.
CREATE TABLE queen.stats_baseline (
    queue_id   bigint PRIMARY KEY,
    pushed     bigint NOT NULL,
    delivered  bigint NOT NULL,
    acked      bigint NOT NULL,
    failed     bigint NOT NULL,
    sampled_at timestamptz NOT NULL
);

-- One row per sampling pass (queue_id 0: the pass itself) and one per queue that had
-- traffic, a backlog or lag in it: throughput since the previous pass, depth and lag now.
CREATE TABLE queen.stats_samples (
    sampled_at    timestamptz NOT NULL,
    queue_id      bigint NOT NULL,
    queue         text NOT NULL,
    namespace     text NOT NULL,
    task          text NOT NULL,
    pushed        bigint NOT NULL,
    delivered     bigint NOT NULL,
    acked         bigint NOT NULL,
    failed        bigint NOT NULL,
    dead_lettered bigint NOT NULL,
    depth         bigint NOT NULL,
    lag_seconds   double precision NOT NULL
);
CREATE INDEX stats_samples_at_idx ON queen.stats_samples (sampled_at);
