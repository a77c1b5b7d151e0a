-- Statements of the admin routes: consumer groups (core/admin/groups.py) and resources
-- (core/admin/resources.py). Loaded by core/storage/statements.py. Lease liveness is judged with now().
-- Every statement is of one tenant's queues (migration 140): its `:tenant` (null in
-- `admin_overview`: every queue).

-- name: admin_queue_by_name
-- A queue's id by name (null when unknown).
SELECT id FROM queen.queues WHERE tenant = :tenant AND name = :name;

-- name: admin_group_cursors
-- Where each group stands on every partition it reads (queen.group_positions: its cursor,
-- or where its subscription rule starts it on a partition it has not read yet), with its
-- queue, offset lag, lease state, time lag and the messages maxWaitTimeSeconds evicted. The
-- time lag is the age of the first unconsumed message: when max(committed + 1, log_start)
-- was written (queen.written_at); 0 when nothing is unconsumed. With `lagging_over`, only positions
-- with messages behind and a time lag above `lagging_over` seconds.
-- `group`, `queue`: null for all.
SELECT g.consumer_group, g.queue_id, g.queue, g.partition_id, g.partition,
       g.committed, g.last_offset, g.log_start, g.offset_lag,
       (g.worker_id IS NOT NULL AND g.lease_expires_at > now()) AS lease_active,
       g.worker_id, g.lease_expires_at, g.retry_count, g.total_consumed, g.last_consumed_at,
       g.oldest_unconsumed_at,
       coalesce(extract(epoch FROM now() - g.oldest_unconsumed_at), 0)::float8
           AS time_lag_seconds,
       g.evicted, g.has_cursor
  FROM (SELECT g.*, q.name AS queue,
               CASE WHEN g.offset_lag > 0
                    THEN queen.written_at(g.partition_id, greatest(g.committed + 1, g.log_start))
               END AS oldest_unconsumed_at
          FROM queen.group_positions g
          JOIN queen.queues q ON q.id = g.queue_id
         WHERE q.tenant = :tenant
           AND (:group::text IS NULL OR g.consumer_group = :group)
           AND (:queue::text IS NULL OR q.name = :queue)) g
 WHERE :lagging_over::float8 IS NULL
    OR (g.offset_lag > 0 AND extract(epoch FROM now() - g.oldest_unconsumed_at) > :lagging_over)
 ORDER BY g.queue, g.consumer_group, g.partition;

-- name: admin_subscriptions
-- Stored subscriptions with their queue name.
-- `group`: null for all.
SELECT s.consumer_group, q.name AS queue, s.mode, s.subscription_from, s.created_at,
       s.conflation
  FROM queen.consumer_subscriptions s JOIN queen.queues q ON q.id = s.queue_id
 WHERE q.tenant = :tenant AND (:group::text IS NULL OR s.consumer_group = :group)
 ORDER BY q.name, s.consumer_group;

-- name: admin_delete_group_cursors
-- Remove a group's cursors (and with them its leases); answers the queue of each row.
-- `queue`: null for every queue.
DELETE FROM queen.log_consumers c
 USING queen.log_partitions p, queen.queues q
 WHERE c.consumer_group = :group AND p.id = c.partition_id AND q.id = p.queue_id
   AND q.tenant = :tenant AND (:queue::text IS NULL OR q.name = :queue)
RETURNING p.queue_id;

-- name: admin_delete_group_subscriptions
-- Remove a group's stored subscriptions; answers one row per subscription removed.
-- `queue`: null for every queue.
DELETE FROM queen.consumer_subscriptions s
 USING queen.queues q
 WHERE s.consumer_group = :group AND q.id = s.queue_id AND q.tenant = :tenant
   AND (:queue::text IS NULL OR q.name = :queue)
RETURNING s.queue_id;

-- name: admin_seek
-- Move a group's cursors on a queue (or one of its partitions) and create missing ones:
-- to the last offset, or to just before the first message created at or after `timestamp` (segments
-- carry one created_at for all their messages, so the first such segment's base offset is
-- exact), or to the last offset when nothing is that recent. Releases any lease and resets
-- the retry counter and the retry delay. Answers each cursor with its partition name.
-- `partition`: null for all; `timestamp`: null for the end.
WITH target AS (
    SELECT p.id, p.name,
           CASE WHEN :timestamp::timestamptz IS NULL THEN p.last_offset
                ELSE coalesce((SELECT s.base_offset - 1 FROM queen.log_segments s
                                WHERE s.partition_id = p.id AND s.created_at >= :timestamp
                                ORDER BY s.base_offset LIMIT 1), p.last_offset)
           END AS committed
      FROM queen.log_partitions p
     WHERE p.queue_id = :queue_id AND (:partition::text IS NULL OR p.name = :partition)),
moved AS (
    INSERT INTO queen.log_consumers AS c (partition_id, consumer_group, committed)
    SELECT t.id, :group, t.committed FROM target t
    ON CONFLICT (partition_id, consumer_group) DO UPDATE
       SET committed = excluded.committed, batch_end = NULL, worker_id = NULL,
           lease_expires_at = NULL, retry_count = 0, not_before = NULL
    RETURNING c.partition_id, c.committed)
SELECT t.name AS partition, m.committed FROM moved m JOIN target t ON t.id = m.partition_id
 ORDER BY t.name;

-- name: admin_set_subscription_timestamp
-- Store a new first-contact instant for every subscription of a group on the tenant's queues
-- (cursors untouched).
UPDATE queen.consumer_subscriptions s
   SET mode = 'timestamp', subscription_from = :timestamp
  FROM queen.queues q
 WHERE s.consumer_group = :group AND q.id = s.queue_id AND q.tenant = :tenant;

-- name: admin_queue_page
-- One page of queues by name, with the number of all matching queues. Every filter is
-- optional (null = any): names containing `search` (case-insensitive), the exact `name`,
-- `namespace`, `task`, created at or after `created_from` and at or before `created_to`;
-- always of one `tenant`.
SELECT id, name, namespace, task, created_at, options::text AS options,
       count(*) OVER () AS total
  FROM queen.queues
 WHERE tenant = :tenant
   AND (:search::text IS NULL OR strpos(lower(name), lower(:search)) > 0)
   AND (:name::text IS NULL OR name = :name)
   AND (:namespace::text IS NULL OR namespace = :namespace)
   AND (:task::text IS NULL OR task = :task)
   AND (:created_from::timestamptz IS NULL OR created_at >= :created_from)
   AND (:created_to::timestamptz IS NULL OR created_at <= :created_to)
 ORDER BY name
 LIMIT :limit OFFSET :offset;

-- name: admin_partition_stats
-- Per-partition figures for the resource routes: retained messages, the worst (lowest)
-- cursor, the largest live leased span, dead letters, failing cursors and retained time span.
-- `queue_ids`: null for every queue of the tenant.
SELECT p.queue_id, q.name AS queue, q.namespace, q.task, p.id, p.name, p.created_at,
       p.last_offset, p.log_start, p.last_write_at,
       greatest(p.last_offset - p.log_start + 1, 0) AS total,
       cur.min_committed, cur.groups, cur.processing, cur.failing,
       (SELECT count(*) FROM queen.log_dlq d WHERE d.partition_id = p.id) AS dead_letter,
       (SELECT s.created_at FROM queen.log_segments s WHERE s.partition_id = p.id
         ORDER BY s.base_offset LIMIT 1) AS oldest_at,
       (SELECT count(*) FROM queen.log_segments s WHERE s.partition_id = p.id) AS segments
  FROM queen.log_partitions p
  JOIN queen.queues q ON q.id = p.queue_id
  LEFT JOIN LATERAL (
        SELECT min(c.committed) AS min_committed, count(*) AS groups,
               coalesce(max(CASE WHEN c.worker_id IS NOT NULL AND c.lease_expires_at > now()
                                 THEN c.batch_end - c.committed END), 0) AS processing,
               count(*) FILTER (WHERE c.retry_count > 0) AS failing
          FROM queen.log_consumers c WHERE c.partition_id = p.id) cur ON true
 WHERE q.tenant = :tenant
   AND (:queue_ids::bigint[] IS NULL OR p.queue_id = ANY(:queue_ids::bigint[]))
 ORDER BY q.name, p.name;

-- name: admin_queue_row
-- A queue's row by name.
SELECT id, name, namespace, task, created_at, options::text AS options
  FROM queen.queues WHERE tenant = :tenant AND name = :name;

-- name: admin_partitions_list
-- Partitions with their queue, optionally of one queue.
-- `queue`: null for all.
SELECT p.id, p.name, q.name AS queue, p.last_offset, p.log_start, p.last_write_at,
       p.created_at
  FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
 WHERE q.tenant = :tenant AND (:queue::text IS NULL OR q.name = :queue)
 ORDER BY q.name, p.name
 LIMIT :limit OFFSET :offset;

-- name: admin_overview
-- Counts for the overview and the metrics routes: of one tenant's queues, or (null) of
-- every queue.
WITH q AS (SELECT id FROM queen.queues WHERE :tenant::text IS NULL OR tenant = :tenant),
p AS (SELECT p.id, p.last_offset, p.log_start
        FROM queen.log_partitions p JOIN q ON q.id = p.queue_id),
c AS (SELECT c.consumer_group, c.worker_id, c.lease_expires_at
        FROM queen.log_consumers c JOIN p ON p.id = c.partition_id)
SELECT (SELECT count(*) FROM q) AS queues,
       (SELECT count(*) FROM p) AS partitions,
       (SELECT coalesce(sum(last_offset + 1), 0)::bigint FROM p) AS appended,
       (SELECT coalesce(sum(greatest(last_offset - log_start + 1, 0)), 0)::bigint
          FROM p) AS retained,
       (SELECT count(*) FROM queen.log_segments s JOIN p ON p.id = s.partition_id)
           AS segments,
       (SELECT count(*) FROM c) AS cursors,
       (SELECT count(*) FROM c
         WHERE worker_id IS NOT NULL AND lease_expires_at > now()) AS live_leases,
       (SELECT count(DISTINCT consumer_group) FROM c) AS groups,
       (SELECT count(*) FROM queen.log_dlq d JOIN p ON p.id = d.partition_id)
           AS dead_letters,
       now() AS db_now;
