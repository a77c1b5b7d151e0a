-- Statements of the reaper (core/upkeep/maintenance.py). Loaded by core/storage/statements.py.
-- Every time decision uses the database clock (now()), never the reaper host's clock.

-- name: reaper_expire_leases
-- Release up to `batch` leases past their expiry and answer the queue and partition of each
-- released lease. SKIP LOCKED: a row a pop or ack is working on is left to them (they see
-- the expiry themselves), and two reapers never release the same lease.
-- The outer WHERE re-checks the expiry, because an extend may have landed in between.
WITH expired AS (
    SELECT c.partition_id, c.consumer_group
      FROM queen.log_consumers c
     WHERE c.lease_expires_at <= now()
     ORDER BY c.lease_expires_at
     LIMIT :batch
       FOR UPDATE SKIP LOCKED)
UPDATE queen.log_consumers c
   SET batch_end = NULL, worker_id = NULL, lease_expires_at = NULL
  FROM expired e
 WHERE c.partition_id = e.partition_id AND c.consumer_group = e.consumer_group
   AND c.lease_expires_at <= now()
RETURNING (SELECT p.queue_id FROM queen.log_partitions p WHERE p.id = c.partition_id) AS queue_id,
          c.partition_id;

-- name: reaper_due_retries
-- Clear up to `batch` not-before times (retryDelay) that have passed and answer the queue and
-- partition of each: those spans are claimable now, and parked pops are woken for them. A
-- passed not-before time and none mean the same to a claim, so clearing it changes no
-- outcome. SKIP LOCKED: a row a pop or ack is working on is left to them.
WITH due AS (
    SELECT c.partition_id, c.consumer_group
      FROM queen.log_consumers c
     WHERE c.not_before <= now()
     ORDER BY c.not_before
     LIMIT :batch
       FOR UPDATE SKIP LOCKED)
UPDATE queen.log_consumers c
   SET not_before = NULL
  FROM due e
 WHERE c.partition_id = e.partition_id AND c.consumer_group = e.consumer_group
   AND c.not_before <= now()
RETURNING (SELECT p.queue_id FROM queen.log_partitions p WHERE p.id = c.partition_id) AS queue_id,
          c.partition_id;

-- name: reaper_try_lock
-- Take a transaction-scoped advisory lock, or answer false at once if another reaper holds it.
SELECT pg_try_advisory_xact_lock(:key);

-- name: reaper_prune_txn_index
-- Delete up to `batch` transactionId index rows older than their queue's keep horizon:
-- greatest(dedupWindowSeconds, floor_seconds) seconds, and answer how many went. The dedup check
-- itself compares created_at with the window, so rows kept longer never cause false duplicates;
-- the floor only keeps ack address resolution an index lookup for recently pushed messages. The
-- plain created_at bound lets the BRIN index (migration 020) skip the young part of the table.
-- Each partition that lost rows has its mark in log_txn_pruned raised past them: acks search its
-- segments below the mark (functions/40_ack.sql), nowhere else.
WITH horizon AS (
    SELECT p.id AS partition_id,
           now() - make_interval(secs => greatest(
               (q.options ->> 'dedupWindowSeconds')::bigint, :floor_seconds::bigint))
               AS cutoff
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id),
doomed AS (
    SELECT i.ctid AS row_id
      FROM queen.log_txn_index i
      JOIN horizon h ON h.partition_id = i.partition_id
     WHERE i.created_at < now() - make_interval(secs => :floor_seconds::bigint)
       AND i.created_at < h.cutoff
     LIMIT :batch),
gone AS (
    DELETE FROM queen.log_txn_index t USING doomed d WHERE t.ctid = d.row_id
    RETURNING t.partition_id, t.msg_offset),
marked AS (
    INSERT INTO queen.log_txn_pruned AS m (partition_id, below)
    SELECT g.partition_id, max(g.msg_offset) + 1 FROM gone g GROUP BY g.partition_id
    ON CONFLICT (partition_id) DO UPDATE SET below = greatest(m.below, excluded.below))
SELECT count(*) FROM gone;

-- name: reaper_retention_partitions
-- Partitions of queues with retention switched on (retentionEnabled) and a time-based or
-- completed retention set, with their cut-offs in seconds (0 = that rule is off) and the
-- queue id. With the switch off the seconds are kept but nothing is deleted. A queue of a
-- tenant with a retention ceiling (queen.tenant_quotas.max_retention_seconds) keeps
-- nothing older than the ceiling, whatever its own options say.
SELECT p.id AS partition_id, p.queue_id,
       CASE WHEN r.enabled AND r.retention > 0
            THEN least(r.retention, coalesce(t.max_retention_seconds, r.retention))
            ELSE coalesce(t.max_retention_seconds, 0) END AS retention,
       CASE WHEN r.enabled THEN r.completed ELSE 0 END AS completed_retention
  FROM queen.queues q
  JOIN queen.log_partitions p ON p.queue_id = q.id
  LEFT JOIN queen.tenant_quotas t ON t.tenant = q.tenant
  CROSS JOIN LATERAL (
        SELECT coalesce((q.options ->> 'retentionEnabled')::boolean, false) AS enabled,
               greatest((q.options ->> 'retentionSeconds')::bigint, 0) AS retention,
               greatest((q.options ->> 'completedRetentionSeconds')::bigint, 0)
                   AS completed) r
 WHERE (r.enabled AND (r.retention > 0 OR r.completed > 0))
    OR t.max_retention_seconds IS NOT NULL
 ORDER BY p.id;

-- name: reaper_apply_retention
-- Delete up to `segment_limit` whole segments of one partition that retention releases, oldest
-- first, and move log_start past them; answers the number of segments deleted, the new
-- log_start, and the messages released by each rule (for the analytics: a segment old enough for
-- the retention cut-off counts there, else for the completed one; messages before the old
-- log_start were released before and are not counted again). A segment goes when it is older
-- than the retention cut-off, or older than the completed cut-off and every group of the
-- partition has committed past its last offset (only when the partition has at least one
-- consumer). Both rules release a prefix of the log (created_at and offsets grow together), so
-- the first remaining offset is the deleted maximum + 1, also when nothing remains. It is
-- computed from the deleted rows rather than from last_offset, which a concurrent append may
-- have moved on. `retention`, `completed_retention`: the partition's two cut-offs in seconds (0
-- = off).
WITH floor AS (
    SELECT min(c.committed) AS committed FROM queen.log_consumers c
     WHERE c.partition_id = :partition_id),
start_ AS (
    SELECT p.log_start FROM queen.log_partitions p WHERE p.id = :partition_id),
doomed AS (
    SELECT s.base_offset,
           (:retention::bigint > 0
            AND s.created_at < now() - make_interval(secs => :retention::bigint)) AS by_age
      FROM queen.log_segments s CROSS JOIN floor f
     WHERE s.partition_id = :partition_id
       AND ((:retention::bigint > 0
             AND s.created_at < now() - make_interval(secs => :retention::bigint))
            OR (:completed_retention::bigint > 0
                AND s.created_at < now() - make_interval(secs => :completed_retention::bigint)
                AND f.committed IS NOT NULL AND s.last_offset <= f.committed))
     ORDER BY s.base_offset
     LIMIT :segment_limit),
deleted AS (
    DELETE FROM queen.log_segments s USING doomed d
     WHERE s.partition_id = :partition_id AND s.base_offset = d.base_offset
    RETURNING s.base_offset, s.last_offset, d.by_age),
moved AS (
    UPDATE queen.log_partitions p
       SET log_start = greatest(p.log_start, (SELECT max(last_offset) + 1 FROM deleted))
     WHERE p.id = :partition_id AND EXISTS (SELECT 1 FROM deleted)
    RETURNING p.log_start),
released AS (
    SELECT d.by_age,
           greatest(d.last_offset - greatest(d.base_offset, coalesce(st.log_start, 0)) + 1, 0)
               AS n
      FROM deleted d LEFT JOIN start_ st ON true)
SELECT (SELECT count(*) FROM deleted) AS segments,
       (SELECT log_start FROM moved) AS log_start,
       (SELECT coalesce(sum(n), 0) FROM released WHERE by_age)::bigint AS by_age,
       (SELECT coalesce(sum(n), 0) FROM released WHERE NOT by_age)::bigint AS by_completion;

-- name: citus_reaper_expired
-- On Citus, the reaper's read of every shard: up to `batch` cursors whose lease passed its
-- expiry, oldest first. A read takes no lock and commits nothing: each shard's cursors are
-- then released by a call on that shard (queen.release_cursors, functions/35_leases.sql).
SELECT c.partition_id, c.consumer_group
  FROM queen.log_consumers c
 WHERE c.lease_expires_at <= now()
 ORDER BY c.lease_expires_at
 LIMIT :batch;

-- name: citus_reaper_due
-- On Citus, as citus_reaper_expired for retryDelay not-before times that passed.
SELECT c.partition_id, c.consumer_group
  FROM queen.log_consumers c
 WHERE c.not_before <= now()
 ORDER BY c.not_before
 LIMIT :batch;

-- name: release_cursors
-- Release the cursors of one shard the read above found (functions/35_leases.sql); with
-- `retries`, clear their passed not-before times instead of their leases.
SELECT queue_id, partition_id
  FROM queen.release_cursors(:route::bigint, :partition_ids::bigint[], :groups::text[],
                             :retries::boolean);

-- name: forget_leases
-- Drop one shard's lease rows of leases over for `after_seconds` (functions/35_leases.sql).
SELECT queen.forget_leases(:route::bigint, :after_seconds::integer);

-- name: citus_reaper_prunable
-- On Citus, the pruning's read of every shard: up to `batch` partitions with index rows older than
-- their queue's keep horizon (as reaper_prune_txn_index says it), each with one past the
-- highest such offset and its horizon. Each shard's are then pruned by a call on that shard
-- (queen.prune_keys, functions/10_keys.sql).
SELECT i.partition_id, max(i.msg_offset) + 1 AS below,
       now() - make_interval(secs => greatest((q.options ->> 'dedupWindowSeconds')::bigint,
                                              :floor_seconds::bigint)) AS cutoff
  FROM queen.log_txn_index i
  JOIN queen.log_partitions p ON p.id = i.partition_id
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE i.created_at < now() - make_interval(secs => :floor_seconds::bigint)
   AND i.created_at < now() - make_interval(secs => greatest(
           (q.options ->> 'dedupWindowSeconds')::bigint, :floor_seconds::bigint))
 GROUP BY i.partition_id, q.options
 LIMIT :batch;

-- name: prune_keys
-- Prune one shard's partitions the read above found (functions/10_keys.sql); answers the
-- rows deleted. Per partition, one past the offsets to prune (`belows`) and its horizon.
SELECT queen.prune_keys(:route::bigint, :partition_ids::bigint[], :belows::bigint[],
                        :cutoffs::timestamptz[]);

-- name: reaper_try_session_lock
-- Take a session advisory lock, or answer false at once if another holds it (for a step that
-- sends its statements autocommitted: on Citus each goes to its shard's node alone).
SELECT pg_try_advisory_lock(:key);

-- name: reaper_session_unlock
-- Let go of a session advisory lock.
SELECT pg_advisory_unlock(:key);
