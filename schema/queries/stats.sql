-- Statements of the observability features (core/upkeep/stats.py, core/counters.py): counter
-- flushes, process heartbeats, analytics samples and the metrics routes' figures.
-- Loaded by core/storage/statements.py. Time is the database's (now()).

-- name: stats_known_partitions
-- Which of these partition ids exist: a flush drops the deltas of the others (an ack
-- naming a made-up partition id). Its own statement, so that the flush below touches only
-- the coordinator's own tables: on Citus the directory is a reference table, and a
-- statement writing local tables that also reads it is planned in several steps with
-- intermediate results (5 times the CPU of the flush alone on this machine, every second in
-- every process).
SELECT partition_id FROM queen.partition_directory
 WHERE partition_id = ANY(:partition_ids::bigint[]);

-- name: stats_flush
-- Add one process's counter deltas, refresh its heartbeat row and add the flush into the
-- process's row of the minute (queen.stats_minutes), in one statement. The caller sends
-- each key once, sorted, so concurrent flushes lock rows in the same order, and only the
-- keys of partitions that exist (stats_known_partitions; a partition deleted in between
-- leaves counters that the next sampling pass forgets, as one deleted during the flush did).
-- The heartbeat row is created with the database's now() as the process's start; the
-- minute row takes its cluster-wide deltas (partition 0) and the gauges of the heartbeat
-- figures (poolSize, poolIdle, poolMax, rssBytes, parked per queue, fileBufferPending, and
-- cpuUserUs/cpuSystemUs: CPU time used since the process's previous flush).
-- Answers the counters written and the cluster's request and message totals (as of the
-- statement's snapshot: without the deltas it adds), for the rates of `/metrics`.
-- `partition_ids`: 0 for a cluster-wide counter; `figures`: JSON; `role`: the process's.
-- (On Citus every table here is a plain table of the coordinator: Citus plans none of it.)
WITH added AS (
    INSERT INTO queen.stats_counters AS c (partition_id, name, value)
    SELECT u.pid, u.name, u.delta
      FROM unnest(:partition_ids::bigint[], :names::text[], :deltas::bigint[])
           AS u(pid, name, delta)
    ON CONFLICT (partition_id, name) DO UPDATE SET value = c.value + excluded.value
    RETURNING 1),
beat AS (
    INSERT INTO queen.stats_processes AS s (process, started_at, seen_at, figures)
    VALUES (:process, now(), now(), :figures::jsonb)
    ON CONFLICT (process) DO UPDATE SET seen_at = now(), figures = excluded.figures
    RETURNING s.started_at),
seen AS (
    SELECT coalesce((f ->> 'cpuUserUs')::bigint, 0) AS cpu_user_us,
           coalesce((f ->> 'cpuSystemUs')::bigint, 0) AS cpu_system_us,
           coalesce((f ->> 'rssBytes')::bigint, 0) AS rss_bytes,
           coalesce((f ->> 'poolMax')::int, 0) AS pool_max,
           coalesce((f ->> 'poolSize')::int, 0) AS pool_size,
           coalesce((f ->> 'poolIdle')::int, 0) AS pool_idle,
           (SELECT coalesce(sum(v::int), 0) FROM jsonb_each_text(f -> 'parked') AS e(k, v))::int
               AS parked,
           coalesce((f ->> 'fileBufferPending')::int, 0) AS spool_pending
      FROM (SELECT :figures::jsonb AS f) j),
minute_row AS (
    INSERT INTO queen.stats_minutes AS m (
        process, minute, role, started_at, flushes, counters, cpu_user_us, cpu_system_us,
        rss_bytes, rss_bytes_max, pool_max, pool_size, pool_idle_sum, pool_idle_min,
        pool_active_max, parked, parked_max, spool_pending, spool_pending_max)
    SELECT :process, date_trunc('minute', now(), 'UTC'), :role, (SELECT started_at FROM beat), 1,
           coalesce((SELECT jsonb_object_agg(u.name, u.delta)
                       FROM unnest(:partition_ids::bigint[], :names::text[], :deltas::bigint[])
                            AS u(pid, name, delta)
                      WHERE u.pid = 0), '{}'::jsonb),
           g.cpu_user_us, g.cpu_system_us, g.rss_bytes, g.rss_bytes, g.pool_max, g.pool_size,
           g.pool_idle, g.pool_idle, greatest(g.pool_size - g.pool_idle, 0), g.parked, g.parked,
           g.spool_pending, g.spool_pending
      FROM seen g
    ON CONFLICT (process, minute) DO UPDATE SET
        flushes = m.flushes + 1,
        -- the two objects' deltas added name by name
        counters = coalesce((SELECT jsonb_object_agg(e.k, e.total)
                               FROM (SELECT k, sum(v::bigint) AS total
                                       FROM (SELECT * FROM jsonb_each_text(m.counters)
                                             UNION ALL
                                             SELECT * FROM jsonb_each_text(excluded.counters))
                                            AS both_(k, v)
                                      GROUP BY k) e), '{}'::jsonb),
        cpu_user_us = m.cpu_user_us + excluded.cpu_user_us,
        cpu_system_us = m.cpu_system_us + excluded.cpu_system_us,
        rss_bytes = excluded.rss_bytes,
        rss_bytes_max = greatest(m.rss_bytes_max, excluded.rss_bytes_max),
        pool_max = excluded.pool_max,
        pool_size = excluded.pool_size,
        pool_idle_sum = m.pool_idle_sum + excluded.pool_idle_sum,
        pool_idle_min = least(m.pool_idle_min, excluded.pool_idle_min),
        pool_active_max = greatest(m.pool_active_max, excluded.pool_active_max),
        parked = excluded.parked,
        parked_max = greatest(m.parked_max, excluded.parked_max),
        spool_pending = excluded.spool_pending,
        spool_pending_max = greatest(m.spool_pending_max, excluded.spool_pending_max)
    RETURNING 1)
SELECT (SELECT count(*) FROM added) AS written,
       (SELECT coalesce(sum(value), 0) FROM queen.stats_counters
         WHERE partition_id = 0 AND name = 'requests')::bigint AS requests,
       (SELECT coalesce(sum(value), 0) FROM queen.stats_counters
         WHERE partition_id = 0 AND name = 'push_messages')::bigint AS messages;

-- name: stats_cluster_counters
-- The cluster-wide counters (every process's flushed deltas, summed as they were added).
SELECT name, value FROM queen.stats_counters WHERE partition_id = 0 ORDER BY name;

-- name: stats_live_processes
-- Processes whose heartbeat is younger than `seconds` seconds, with the database's now.
SELECT process, started_at, seen_at, figures::text AS figures, now() AS db_now
  FROM queen.stats_processes
 WHERE seen_at > now() - make_interval(secs => :seconds::float8)
 ORDER BY process;

-- name: stats_forget_processes
-- Drop heartbeat rows older than `seconds` seconds (processes that stopped or died).
DELETE FROM queen.stats_processes
 WHERE seen_at < now() - make_interval(secs => :seconds::float8);

-- name: stats_queue_gauges
-- Per queue: dead letters, and the pop lag: the age in milliseconds of the oldest message a
-- group has not had delivered yet (past its position and past the span a live lease holds),
-- the worst group's; 0 when every group has been served everything. Positions are
-- queen.group_positions': a partition a group has not read yet counts from where its
-- subscription rule starts it. One segment probe per partition: its least served position.
-- With the queue's tenant (every queue's gauges, the metrics label them by tenant).
WITH served AS (
    SELECT g.queue_id, g.partition_id, max(g.last_offset) AS last_offset,
           min(greatest(g.committed, g.log_start - 1,
                        CASE WHEN g.worker_id IS NOT NULL AND g.lease_expires_at > now()
                             THEN g.batch_end END)) AS served
      FROM queen.group_positions g
     GROUP BY g.queue_id, g.partition_id),
lag AS (
    SELECT k.queue_id, max(extract(epoch FROM now() - s.created_at)) * 1000 AS ms
      FROM served k
      CROSS JOIN LATERAL (
            SELECT x.created_at FROM queen.log_segments x
             WHERE k.last_offset > k.served
               AND x.partition_id = k.partition_id
               AND x.base_offset <= k.served + 1
             ORDER BY x.base_offset DESC LIMIT 1) s
     GROUP BY k.queue_id)
SELECT q.id, q.name,
       (SELECT count(*) FROM queen.log_dlq d JOIN queen.log_partitions p ON p.id = d.partition_id
         WHERE p.queue_id = q.id) AS dead_letters,
       coalesce(lag.ms, 0)::float8 AS lag_ms, q.tenant
  FROM queen.queues q
  LEFT JOIN lag ON lag.queue_id = q.id
 ORDER BY q.tenant, q.name;

-- name: stats_replication
-- The standbys streaming from this server (an HA pair's synchronous standby, docs/deploying/
-- high-availability.md): how far behind each has replayed, in bytes of WAL and in seconds
-- (PostgreSQL's replay_lag; null once a standby has been caught up for a while, read as 0).
-- The byte figure is null where the database user may not read WAL positions (grant it
-- pg_monitor). Empty on a server without standbys.
SELECT coalesce(r.application_name, '') AS standby, coalesce(r.state, '') AS state,
       coalesce(r.sync_state, '') AS sync_state,
       pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                            ELSE pg_current_wal_lsn() END, r.replay_lsn)::float8 AS lag_bytes,
       coalesce(extract(epoch FROM r.replay_lag), 0)::float8 AS lag_seconds
  FROM pg_stat_replication r
 ORDER BY 1;

-- name: stats_lock
-- Serialise sampling passes (the reaper's, `stats/refresh`, several reapers): waits for the
-- transaction of another pass to end, so the next one reads the baseline it wrote.
SELECT pg_advisory_xact_lock(:key);

-- name: stats_sample_figures
-- One sampling pass, first half: reads, per queue, the cumulative counters now (pushed =
-- offsets allocated, acked = messages cursors consumed, evicted = messages
-- maxWaitTimeSeconds skipped, delivered/failed and what retention released = the processes'
-- flushed per-partition counters), dead letters written since the previous pass (see
-- `dead` below), the backlog
-- of the worst group (depth), the age of the oldest message a group has not consumed (lag),
-- the partition count and the long-poll pops parked on the queue (live processes'
-- heartbeats, younger than `live_seconds` seconds). Positions come from queen.group_positions (a
-- partition a group reads but has not popped counts from where its subscription rule starts
-- it; one nobody reads counts every retained message in depth).
-- Only reads: on Citus the log's tables are distributed and the stats tables are the
-- coordinator's own, and Citus runs no statement that reads the first and writes the second,
-- so the figures go through the broker to stats_sample_store. Answers one row: the figures
-- (JSON text, one object per queue) and the partitions whose flushed counters outlive them.
-- `live_seconds`: within which a heartbeat counts as live.
-- The coordinator's own tables are read in CTEs of their own, MATERIALIZED: Citus joins their
-- results to the distributed tables, never the tables themselves.
WITH prev AS MATERIALIZED (
    SELECT max(sampled_at) AS at FROM queen.stats_samples WHERE queue_id = 0),
counters AS MATERIALIZED (
    SELECT c.partition_id,
           sum(c.value) FILTER (WHERE c.name = 'delivered') AS delivered,
           sum(c.value) FILTER (WHERE c.name = 'failed') AS failed,
           sum(c.value) FILTER (WHERE c.name = 'retention_released') AS retention_released,
           sum(c.value) FILTER (WHERE c.name = 'completed_released') AS completed_released,
           sum(c.value) FILTER (WHERE c.name = 'retention_segments') AS retention_segments
      FROM queen.stats_counters c
     WHERE c.partition_id <> 0
     GROUP BY c.partition_id),
positions AS (
    SELECT g.partition_id, min(g.committed) AS low, sum(g.total_consumed) AS consumed,
           sum(g.evicted) AS evicted
      FROM queen.group_positions g
     GROUP BY g.partition_id),
parts AS (
    SELECT p.queue_id,
           count(*) AS partitions,
           sum(p.last_offset + 1) AS pushed,
           sum(greatest(p.last_offset - greatest(coalesce(cur.low, -1), p.log_start - 1), 0))
               AS depth,
           sum(coalesce(cur.consumed, 0)) AS acked,
           sum(coalesce(cur.evicted, 0)) AS evicted,
           max(coalesce(extract(epoch FROM now() - lag.created_at), 0)) AS lag
      FROM queen.log_partitions p
      LEFT JOIN positions cur ON cur.partition_id = p.id
      LEFT JOIN LATERAL (
            SELECT s.created_at FROM queen.log_segments s
             WHERE cur.low IS NOT NULL
               AND p.last_offset > greatest(cur.low, p.log_start - 1)
               AND s.partition_id = p.id
               AND s.base_offset <= greatest(cur.low + 1, p.log_start)
             ORDER BY s.base_offset DESC LIMIT 1) lag ON true
     GROUP BY p.queue_id),
counted AS (
    SELECT p.queue_id, sum(c.delivered) AS delivered, sum(c.failed) AS failed,
           sum(c.retention_released) AS retention_released,
           sum(c.completed_released) AS completed_released,
           sum(c.retention_segments) AS retention_segments
      FROM counters c JOIN queen.log_partitions p ON p.id = c.partition_id
     GROUP BY p.queue_id),
counted_partitions AS MATERIALIZED (
    SELECT p.id FROM counters c JOIN queen.log_partitions p ON p.id = c.partition_id),
-- A dead letter is stamped with its transaction's start, and a transaction that began
-- before the previous pass may commit after that pass read the table: counted by its stamp
-- since the previous pass, it would be counted by neither. So the pass reads three counts per
-- queue: stamped since the previous pass (`since_prev`, what a baseline from before version
-- 160 counts), since a minute before it (`since_overlap`), and in the minute before this
-- pass (`recent`, which the baseline keeps). stats_sample_store counts `since_overlap`
-- minus what the previous pass kept: each dead letter whose transaction took less than a
-- minute is counted once, by the first pass that sees it.
dead AS (
    SELECT p.queue_id,
           count(*) FILTER (WHERE d.failed_at > prev.at) AS since_prev,
           count(*) FILTER (WHERE prev.at IS NOT NULL) AS since_overlap,
           count(*) FILTER (WHERE d.failed_at > now() - interval '1 minute') AS recent
      FROM queen.log_dlq d JOIN queen.log_partitions p ON p.id = d.partition_id, prev
     WHERE d.failed_at > least(prev.at, now()) - interval '1 minute'
     GROUP BY p.queue_id),
parked AS MATERIALIZED (
    SELECT e.k::bigint AS queue_id, sum(e.v::bigint) AS n
      FROM queen.stats_processes s, jsonb_each_text(s.figures -> 'parked') AS e(k, v)
     WHERE s.seen_at > now() - make_interval(secs => :live_seconds::float8)
     GROUP BY 1),
now_ AS (
    SELECT q.id, q.name, q.namespace, q.task, q.created_at, q.tenant,
           coalesce(pa.pushed, 0)::bigint AS pushed, coalesce(co.delivered, 0)::bigint AS delivered,
           coalesce(pa.acked, 0)::bigint AS acked, coalesce(co.failed, 0)::bigint AS failed,
           coalesce(pa.evicted, 0)::bigint AS evicted,
           coalesce(co.retention_released, 0)::bigint AS retention_released,
           coalesce(co.completed_released, 0)::bigint AS completed_released,
           coalesce(co.retention_segments, 0)::bigint AS retention_segments,
           coalesce(de.since_prev, 0)::bigint AS dead_since_prev,
           coalesce(de.since_overlap, 0)::bigint AS dead_since_overlap,
           coalesce(de.recent, 0)::bigint AS dead_recent, coalesce(pa.depth, 0)::bigint AS depth,
           coalesce(pa.lag, 0)::float8 AS lag, coalesce(pa.partitions, 0)::bigint AS partitions,
           coalesce(pk.n, 0)::bigint AS parked
      FROM queen.queues q
      LEFT JOIN parts pa ON pa.queue_id = q.id
      LEFT JOIN counted co ON co.queue_id = q.id
      LEFT JOIN dead de ON de.queue_id = q.id
      LEFT JOIN parked pk ON pk.queue_id = q.id)
SELECT (SELECT coalesce(jsonb_agg(to_jsonb(n)), '[]'::jsonb) FROM now_ n)::text AS figures,
       (SELECT coalesce(array_agg(c.partition_id), '{}'::bigint[])
          FROM counters c
         WHERE c.partition_id NOT IN (SELECT k.id FROM counted_partitions k)) AS orphans;

-- name: stats_sample_store
-- One sampling pass, second half (the first: stats_sample_figures, in the same transaction):
-- each queue's figures minus the previous pass's baseline. Stores a row for the pass
-- (queue_id 0) and one per queue with something to show, moves the baseline, and forgets
-- baselines of deleted queues and the counters of deleted partitions. Touches only the
-- coordinator's own stats tables (Citus runs it as plain PostgreSQL).
-- A queue without a baseline counts from zero when it was created after the first pass kept:
-- no pass has seen it, so none of its traffic was counted yet. (Not "after the previous
-- pass": a queue whose creating transaction began before the previous pass and committed
-- after that pass's snapshot is stamped before it, yet was not seen by it, and its first
-- traffic was lost.) On the very first pass nothing is counted (the history before it is
-- unknown, not a spike),
-- nor for a figure its baseline does not hold yet (a baseline from before version 130).
-- Answers the number of queue rows stored.
-- `figures`: stats_sample_figures' JSON text; `orphans`: partitions whose counters to forget.
WITH prev AS (
    SELECT max(sampled_at) AS at, min(sampled_at) AS first_at
      FROM queen.stats_samples WHERE queue_id = 0),
now_ AS (
    SELECT * FROM jsonb_to_recordset(:figures::text::jsonb) AS n(
               id bigint, name text, namespace text, task text, created_at timestamptz,
               tenant text, pushed bigint, delivered bigint, acked bigint, failed bigint,
               evicted bigint, retention_released bigint, completed_released bigint,
               retention_segments bigint, dead_since_prev bigint,
               dead_since_overlap bigint, dead_recent bigint, depth bigint, lag float8,
               partitions bigint, parked bigint)),
delta AS (
    SELECT n.*,
           CASE WHEN b.queue_id IS NOT NULL THEN true
                WHEN prev.at IS NOT NULL AND n.created_at > prev.first_at THEN true
                ELSE false END AS counts,
           b.queue_id IS NOT NULL AS has_baseline,
           coalesce(b.pushed, 0) AS b_pushed, coalesce(b.delivered, 0) AS b_delivered,
           coalesce(b.acked, 0) AS b_acked, coalesce(b.failed, 0) AS b_failed,
           b.evicted AS b_evicted, b.retention_released AS b_retention_released,
           b.completed_released AS b_completed_released,
           b.retention_segments AS b_retention_segments,
           -- the dead letters since the previous pass (stats_sample_figures, `dead`)
           CASE WHEN b.dead_recent IS NULL THEN n.dead_since_prev
                ELSE greatest(n.dead_since_overlap - b.dead_recent, 0) END AS dead
      FROM now_ n CROSS JOIN prev LEFT JOIN queen.stats_baseline b ON b.queue_id = n.id),
rows_ AS (
    SELECT id, name, namespace, task, tenant, depth, lag, dead, partitions, parked,
           CASE WHEN counts THEN greatest(pushed - b_pushed, 0) ELSE 0 END AS d_pushed,
           CASE WHEN counts THEN greatest(delivered - b_delivered, 0) ELSE 0 END AS d_delivered,
           CASE WHEN counts THEN greatest(acked - b_acked, 0) ELSE 0 END AS d_acked,
           CASE WHEN counts THEN greatest(failed - b_failed, 0) ELSE 0 END AS d_failed,
           -- a baseline row without the figure: from before version 130, count nothing yet
           CASE WHEN NOT counts OR (has_baseline AND b_evicted IS NULL) THEN 0
                ELSE greatest(evicted - coalesce(b_evicted, 0), 0) END AS d_evicted,
           CASE WHEN NOT counts OR (has_baseline AND b_retention_released IS NULL) THEN 0
                ELSE greatest(retention_released - coalesce(b_retention_released, 0), 0)
           END AS d_retention_released,
           CASE WHEN NOT counts OR (has_baseline AND b_completed_released IS NULL) THEN 0
                ELSE greatest(completed_released - coalesce(b_completed_released, 0), 0)
           END AS d_completed_released,
           CASE WHEN NOT counts OR (has_baseline AND b_retention_segments IS NULL) THEN 0
                ELSE greatest(retention_segments - coalesce(b_retention_segments, 0), 0)
           END AS d_retention_segments
      FROM delta),
stored AS (
    INSERT INTO queen.stats_samples (sampled_at, queue_id, queue, namespace, task, pushed,
                                     delivered, acked, failed, dead_lettered, depth,
                                     lag_seconds, partitions, parked, evicted,
                                     retention_released, completed_released,
                                     retention_segments, tenant)
    SELECT now(), id, name, namespace, task, d_pushed, d_delivered, d_acked, d_failed, dead,
           depth, lag, partitions, parked, d_evicted, d_retention_released,
           d_completed_released, d_retention_segments, tenant
      FROM rows_
     WHERE d_pushed > 0 OR d_delivered > 0 OR d_acked > 0 OR d_failed > 0 OR dead > 0
        OR depth > 0 OR lag > 0 OR parked > 0 OR d_evicted > 0 OR d_retention_released > 0
        OR d_completed_released > 0 OR d_retention_segments > 0
    UNION ALL
    -- (FROM prev, one row: Citus plans no subquery without FROM that calls now())
    SELECT now(), 0, '', '', '', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '' FROM prev
    RETURNING queue_id),
moved AS (
    INSERT INTO queen.stats_baseline AS b (queue_id, pushed, delivered, acked, failed,
                                           sampled_at, evicted, retention_released,
                                           completed_released, retention_segments,
                                           dead_recent)
    SELECT id, pushed, delivered, acked, failed, now(), evicted, retention_released,
           completed_released, retention_segments, dead_recent
      FROM now_
    ON CONFLICT (queue_id) DO UPDATE
       SET pushed = excluded.pushed, delivered = excluded.delivered, acked = excluded.acked,
           failed = excluded.failed, sampled_at = excluded.sampled_at,
           evicted = excluded.evicted, retention_released = excluded.retention_released,
           completed_released = excluded.completed_released,
           retention_segments = excluded.retention_segments,
           dead_recent = excluded.dead_recent),
forgotten AS (
    DELETE FROM queen.stats_baseline b
     WHERE NOT EXISTS (SELECT 1 FROM now_ n WHERE n.id = b.queue_id)),
orphans AS (
    DELETE FROM queen.stats_counters c WHERE c.partition_id = ANY (:orphans::bigint[]))
-- (Data-modifying CTEs run to completion whether or not the final SELECT reads them.)
SELECT count(*) FROM stored WHERE queue_id <> 0;

-- name: stats_trim_samples
-- Delete up to `batch` samples older than `days` days (analytics retention,
-- METRICS_RETENTION_DAYS).
DELETE FROM queen.stats_samples s
 USING (SELECT ctid AS row_id FROM queen.stats_samples
         WHERE sampled_at < now() - make_interval(days => :days::int)
         LIMIT :batch) doomed
 WHERE s.ctid = doomed.row_id;

-- name: stats_trim_minutes
-- Delete up to `batch` per-process minute rows older than `days` days
-- (PROCESS_METRICS_RETENTION_DAYS).
DELETE FROM queen.stats_minutes m
 USING (SELECT process, minute FROM queen.stats_minutes
         WHERE minute < now() - make_interval(days => :days::int)
         LIMIT :batch) doomed
 WHERE m.process = doomed.process AND m.minute = doomed.minute;

-- name: stats_series
-- The analytics series: per bucket (date_trunc of the unit `unit`, in UTC) of the passes between
-- `start` and `end`, throughput summed over the matching queues' rows, the depth at the bucket's
-- last pass (queues without a row then had none) and the largest lag seen in the bucket. `unit`:
-- minute|hour|day|week|month; `queue`, `namespace`, `task`: null for any; `tenant`: its queues'
-- samples only.
WITH passes AS (
    SELECT date_trunc(:unit, sampled_at, 'UTC') AS bucket, max(sampled_at) AS last_at
      FROM queen.stats_samples
     WHERE queue_id = 0 AND sampled_at >= :start AND sampled_at <= :end
     GROUP BY 1),
matched AS (
    SELECT date_trunc(:unit, s.sampled_at, 'UTC') AS bucket, s.*
      FROM queen.stats_samples s
     WHERE s.queue_id <> 0 AND s.sampled_at >= :start AND s.sampled_at <= :end
       AND s.tenant = :tenant
       AND (:queue::text IS NULL OR s.queue = :queue)
       AND (:namespace::text IS NULL OR s.namespace = :namespace)
       AND (:task::text IS NULL OR s.task = :task))
SELECT p.bucket AS at,
       coalesce(sum(m.pushed), 0)::bigint AS pushed,
       coalesce(sum(m.delivered), 0)::bigint AS delivered,
       coalesce(sum(m.acked), 0)::bigint AS acked,
       coalesce(sum(m.failed), 0)::bigint AS failed,
       coalesce(sum(m.dead_lettered), 0)::bigint AS dead_lettered,
       coalesce(sum(m.depth) FILTER (WHERE m.sampled_at = p.last_at), 0)::bigint AS depth,
       coalesce(max(m.lag_seconds), 0)::float8 AS lag_seconds
  FROM passes p LEFT JOIN matched m ON m.bucket = p.bucket
 GROUP BY p.bucket
 ORDER BY p.bucket;

-- name: stats_safe_time
-- The instant before which every write is visible to a statement issued after this one:
-- the start of the oldest transaction still open in this database (its writes may carry an
-- earlier time than their commit), or now when there is none. Read before the partitions,
-- so a transaction that commits in between is either seen open here or visible there.
SELECT least(clock_timestamp(),
             (SELECT min(a.xact_start) FROM pg_stat_activity a
               WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
                 AND a.xact_start IS NOT NULL AND a.backend_type = 'client backend'));

-- name: stats_changed_partitions
-- A queue's partitions written at or after `since` (all when null), in creation (id) order after
-- the page cursor `after`, at most `limit`; null rows when the queue does not exist. (A join to a
-- subquery, not a lateral one: Citus refuses a lateral join of a distributed table to a
-- reference table.)
SELECT q.id AS queue_id, p.id, p.name, p.last_offset, p.log_start, p.last_write_at
  FROM queen.queues q
  LEFT JOIN (
        SELECT p.* FROM queen.log_partitions p
          JOIN queen.queues pq ON pq.id = p.queue_id
         WHERE pq.tenant = :tenant AND pq.name = :queue
           AND (:since::timestamptz IS NULL OR p.last_write_at >= :since)
           AND (:after::bigint IS NULL OR p.id > :after)
         ORDER BY p.id
         LIMIT :limit) p ON p.queue_id = q.id
 WHERE q.tenant = :tenant AND q.name = :queue
 ORDER BY p.id;
