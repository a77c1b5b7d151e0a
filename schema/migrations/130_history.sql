-- Version 130: history for the analytics family (/api/v1/analytics/*) and the dashboard's
-- charts over a chosen window (docs/operating/metrics.md, "History").
--
-- Two kinds of history, both written off the hot path and trimmed by the reaper:
-- - per process and minute (queen.stats_minutes): what each process counted and how it
--   looked, added by its counter flush (core/upkeep/stats.py `CounterFlusher`), one upsert
--   per flush; kept PROCESS_METRICS_RETENTION_DAYS;
-- - per queue and sampling pass (queen.stats_samples, version 50): a few more columns
--   below; kept METRICS_RETENTION_DAYS.

-- One row per process (host:pid) and UTC minute in which it flushed. A process that
-- restarts is a new process (a new pid, its own started_at), so a restart shows as one
-- series ending and another beginning. Counters are deltas counted in that minute;
-- gauges are as the flushes of the minute saw them (last value, extremes, or a sum that
-- `flushes` turns into an average).
CREATE TABLE queen.stats_minutes (
    process           text NOT NULL,         -- host:pid, as in queen.stats_processes
    minute            timestamptz NOT NULL,  -- date_trunc('minute', the flush's now())
    role              text NOT NULL,         -- web, kafka, reaper, timer firer
    started_at        timestamptz NOT NULL,  -- when the process first flushed
    flushes           integer NOT NULL,      -- flushes added into the row
    counters          jsonb NOT NULL,        -- {counter name: delta} of core/counters.py, cluster-wide names only
    cpu_user_us       bigint NOT NULL,       -- CPU time the process used in the minute
    cpu_system_us     bigint NOT NULL,
    rss_bytes         bigint NOT NULL,       -- resident memory at the last flush
    rss_bytes_max     bigint NOT NULL,
    pool_max          integer NOT NULL,      -- DB_POOL_SIZE
    pool_size         integer NOT NULL,      -- open connections at the last flush
    pool_idle_sum     bigint NOT NULL,       -- idle connections summed over the flushes
    pool_idle_min     integer NOT NULL,
    pool_active_max   integer NOT NULL,      -- connections in use, the most seen
    parked            integer NOT NULL,      -- long-poll pops parked at the last flush
    parked_max        integer NOT NULL,
    spool_pending     integer NOT NULL,      -- pushes waiting in the spool at the last flush
    spool_pending_max integer NOT NULL,
    PRIMARY KEY (process, minute)
);
CREATE INDEX stats_minutes_minute_idx ON queen.stats_minutes (minute);

-- Per queue and pass, beside throughput, depth and lag: the partition count, long-poll pops
-- parked on the queue, messages maxWaitTimeSeconds evicted, and what retention released
-- (messages by rule, segments deleted) since the previous pass.
ALTER TABLE queen.stats_samples
    ADD COLUMN partitions         bigint NOT NULL DEFAULT 0,
    ADD COLUMN parked             bigint NOT NULL DEFAULT 0,
    ADD COLUMN evicted            bigint NOT NULL DEFAULT 0,
    ADD COLUMN retention_released bigint NOT NULL DEFAULT 0,
    ADD COLUMN completed_released bigint NOT NULL DEFAULT 0,
    ADD COLUMN retention_segments bigint NOT NULL DEFAULT 0;

-- The cumulative figures behind those deltas. Null in a baseline written before this
-- version: the next pass then counts nothing for them (the history before is unknown, not
-- a spike) and stores the figure.
ALTER TABLE queen.stats_baseline
    ADD COLUMN evicted            bigint,
    ADD COLUMN retention_released bigint,
    ADD COLUMN completed_released bigint,
    ADD COLUMN retention_segments bigint;
