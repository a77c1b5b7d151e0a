-- Statements of the analytics family (core/upkeep/history.py, /api/v1/analytics/*): reads of
-- the per-process minute rows (queen.stats_minutes) and of the per-queue samples
-- (queen.stats_samples), rolled up into buckets of a whole number of minutes. Buckets start
-- at multiples of their width since 2000-01-01 UTC, so every answer of the same width lines
-- up. Loaded by core/storage/statements.py.

-- name: history_process_buckets
-- Per process and bucket of `minutes` minutes between `start` and `end`: the counters the
-- process counted (summed name by name, as JSON text), and its gauges over the minutes of the
-- bucket (average, least, most and last of the per-minute values). Optionally one host
-- (`hostname`) or one pid (`pid`).
WITH picked AS (
    SELECT m.*,
           date_bin(make_interval(mins => :minutes::int), m.minute,
                    timestamptz '2000-01-01 00:00:00+00') AS bucket
      FROM queen.stats_minutes m
     WHERE m.minute >= date_trunc('minute', :start::timestamptz, 'UTC') AND m.minute <= :end
       AND (:hostname::text IS NULL OR regexp_replace(m.process, ':[0-9]+$', '') = :hostname)
       AND (:pid::bigint IS NULL OR split_part(m.process, ':', -1) = :pid::text)),
summed AS (
    SELECT p.process, p.bucket, jsonb_object_agg(e.k, e.total) AS counters
      FROM (SELECT x.process, x.bucket, c.k, sum(c.v::bigint) AS total
              FROM picked x, jsonb_each_text(x.counters) AS c(k, v)
             GROUP BY 1, 2, 3) e
      JOIN (SELECT DISTINCT process, bucket FROM picked) p
        ON p.process = e.process AND p.bucket = e.bucket
     GROUP BY 1, 2)
SELECT x.process, min(x.role) AS role, min(x.started_at) AS started_at, x.bucket,
       count(*)::int AS minutes, sum(x.flushes)::int AS flushes,
       coalesce(min(s.counters::text), '{}') AS counters,
       avg(x.cpu_user_us)::float8 AS cpu_user_avg, min(x.cpu_user_us) AS cpu_user_min,
       max(x.cpu_user_us) AS cpu_user_max,
       (array_agg(x.cpu_user_us ORDER BY x.minute DESC))[1] AS cpu_user_last,
       avg(x.cpu_system_us)::float8 AS cpu_system_avg, min(x.cpu_system_us) AS cpu_system_min,
       max(x.cpu_system_us) AS cpu_system_max,
       (array_agg(x.cpu_system_us ORDER BY x.minute DESC))[1] AS cpu_system_last,
       avg(x.rss_bytes)::float8 AS rss_avg, min(x.rss_bytes) AS rss_min,
       max(x.rss_bytes_max) AS rss_max,
       (array_agg(x.rss_bytes ORDER BY x.minute DESC))[1] AS rss_last,
       (array_agg(x.pool_max ORDER BY x.minute DESC))[1] AS pool_capacity,
       avg(x.pool_size)::float8 AS pool_open_avg, min(x.pool_size) AS pool_open_min,
       max(x.pool_size) AS pool_open_max,
       (array_agg(x.pool_size ORDER BY x.minute DESC))[1] AS pool_open_last,
       (sum(x.pool_idle_sum)::float8 / greatest(sum(x.flushes), 1)) AS pool_idle_avg,
       min(x.pool_idle_min) AS pool_idle_min,
       max(x.pool_active_max) AS pool_active_max,
       avg(x.parked)::float8 AS parked_avg, max(x.parked_max) AS parked_max,
       (array_agg(x.parked ORDER BY x.minute DESC))[1] AS parked_last,
       max(x.spool_pending_max) AS spool_pending_max,
       (array_agg(x.spool_pending ORDER BY x.minute DESC))[1] AS spool_pending_last
  FROM picked x
  LEFT JOIN summed s ON s.process = x.process AND s.bucket = x.bucket
 GROUP BY x.process, x.bucket
 ORDER BY x.process, x.bucket;

-- name: history_processes
-- Every process with a minute row between `start` and `end`: its role and start, the first and
-- last minute it flushed in the window, whether its heartbeat is younger than `live_seconds`
-- seconds (alive), and what it counted in the window (JSON text).
WITH picked AS (
    SELECT m.* FROM queen.stats_minutes m
     WHERE m.minute >= date_trunc('minute', :start::timestamptz, 'UTC') AND m.minute <= :end),
summed AS (
    SELECT e.process, jsonb_object_agg(e.k, e.total) AS counters
      FROM (SELECT x.process, c.k, sum(c.v::bigint) AS total
              FROM picked x, jsonb_each_text(x.counters) AS c(k, v)
             GROUP BY 1, 2) e
     GROUP BY 1)
SELECT x.process, min(x.role) AS role, min(x.started_at) AS started_at,
       min(x.minute) AS first_minute, max(x.minute) AS last_minute,
       coalesce(bool_or(h.seen_at > now() - make_interval(secs => :live_seconds::float8)),
                false) AS alive,
       coalesce(min(s.counters::text), '{}') AS counters,
       min(x.pool_idle_min) AS pool_idle_min, max(x.pool_size) AS pool_open_max
  FROM picked x
  LEFT JOIN summed s ON s.process = x.process
  LEFT JOIN queen.stats_processes h ON h.process = x.process
 GROUP BY x.process
 ORDER BY min(x.started_at), x.process;

-- name: history_queue_buckets
-- Per queue and bucket of `minutes` minutes between `start` and `end`, the queue's sample rows
-- summed: throughput and what retention released (sums), depth and partitions at the bucket's
-- last row, lag (average and largest), parked pops (average). Optionally one queue (`queue`),
-- one namespace (`namespace`), one task (`task`); one tenant's queues (`tenant`), or every
-- tenant's (null: two tenants' queues of one name are two rows). `tenant`: null for every
-- tenant.
SELECT date_bin(make_interval(mins => :minutes::int), s.sampled_at,
                timestamptz '2000-01-01 00:00:00+00') AS bucket,
       s.queue, s.tenant, count(*)::int AS samples,
       sum(s.pushed)::bigint AS pushed, sum(s.delivered)::bigint AS delivered,
       sum(s.acked)::bigint AS acked, sum(s.failed)::bigint AS failed,
       sum(s.dead_lettered)::bigint AS dead_lettered,
       (array_agg(s.depth ORDER BY s.sampled_at DESC))[1] AS depth,
       (array_agg(s.partitions ORDER BY s.sampled_at DESC))[1] AS partitions,
       avg(s.lag_seconds)::float8 AS lag_avg, max(s.lag_seconds)::float8 AS lag_max,
       avg(s.parked)::float8 AS parked_avg,
       sum(s.evicted)::bigint AS evicted,
       sum(s.retention_released)::bigint AS retention_released,
       sum(s.completed_released)::bigint AS completed_released,
       sum(s.retention_segments)::bigint AS retention_segments
  FROM queen.stats_samples s
 WHERE s.queue_id <> 0 AND s.sampled_at >= :start AND s.sampled_at <= :end
   AND (:queue::text IS NULL OR s.queue = :queue)
   AND (:namespace::text IS NULL OR s.namespace = :namespace)
   AND (:task::text IS NULL OR s.task = :task)
   AND (:tenant::text IS NULL OR s.tenant = :tenant)
 GROUP BY 1, 2, 3
 ORDER BY 1, 3, 2;
