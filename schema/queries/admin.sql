-- Statements of the admin routes: consumer groups (core/admin/groups.py) and resources
-- (core/admin/resources.py). Loaded by core/storage/statements.py. Lease liveness is judged with now().
-- Every statement is of one tenant's queues (migration 140): its last parameter, or
-- `:tenant` in a statement with named parameters.

-- name: admin_queue_by_name
-- A queue's id by name (null when unknown).
-- $1 queue name, $2 tenant
SELECT id FROM queen.queues WHERE tenant = $2 AND name = $1;

-- name: admin_group_cursors
-- Where each group stands on every partition it reads (queen.group_positions: its cursor,
-- or where its subscription rule starts it on a partition it has not read yet), with its
-- queue, offset lag, lease state, time lag and the messages maxWaitTimeSeconds evicted. The
-- time lag is the age of the first unconsumed message: when max(committed + 1, log_start)
-- was written (queen.written_at); 0 when nothing is unconsumed. With $3, only positions
-- with messages behind and a time lag above $3 seconds.
-- $1 consumer group or null (all), $2 queue name or null (all), $3 seconds or null,
-- $4 tenant
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
         WHERE q.tenant = $4
           AND ($1::text IS NULL OR g.consumer_group = $1)
           AND ($2::text IS NULL OR q.name = $2)) g
 WHERE $3::float8 IS NULL
    OR (g.offset_lag > 0 AND extract(epoch FROM now() - g.oldest_unconsumed_at) > $3)
 ORDER BY g.queue, g.consumer_group, g.partition;

-- name: admin_subscriptions
-- Stored subscriptions with their queue name.
-- $1 consumer group or null (all), $2 tenant
SELECT s.consumer_group, q.name AS queue, s.mode, s.subscription_from, s.created_at,
       s.conflation
  FROM queen.consumer_subscriptions s JOIN queen.queues q ON q.id = s.queue_id
 WHERE q.tenant = $2 AND ($1::text IS NULL OR s.consumer_group = $1)
 ORDER BY q.name, s.consumer_group;

-- name: admin_delete_group_cursors
-- Remove a group's cursors (and with them its leases); answers the queue of each row.
-- $1 consumer group, $2 queue name or null (every queue), $3 tenant
DELETE FROM queen.log_consumers c
 USING queen.log_partitions p, queen.queues q
 WHERE c.consumer_group = $1 AND p.id = c.partition_id AND q.id = p.queue_id
   AND q.tenant = $3 AND ($2::text IS NULL OR q.name = $2)
RETURNING p.queue_id;

-- name: admin_delete_group_subscriptions
-- Remove a group's stored subscriptions; answers one row per subscription removed.
-- $1 consumer group, $2 queue name or null (every queue), $3 tenant
DELETE FROM queen.consumer_subscriptions s
 USING queen.queues q
 WHERE s.consumer_group = $1 AND q.id = s.queue_id AND q.tenant = $3
   AND ($2::text IS NULL OR q.name = $2)
RETURNING s.queue_id;

-- name: admin_seek
-- Move a group's cursors on a queue (or one of its partitions) and create missing ones:
-- to the last offset, or to just before the first message created at or after $4 (segments
-- carry one created_at for all their messages, so the first such segment's base offset is
-- exact), or to the last offset when nothing is that recent. Releases any lease and resets
-- the retry counter and the retry delay. Answers each cursor with its partition name.
-- $1 queue id, $2 consumer group, $3 partition name or null (all), $4 timestamp or null (end)
WITH target AS (
    SELECT p.id, p.name,
           CASE WHEN $4::timestamptz IS NULL THEN p.last_offset
                ELSE coalesce((SELECT s.base_offset - 1 FROM queen.log_segments s
                                WHERE s.partition_id = p.id AND s.created_at >= $4
                                ORDER BY s.base_offset LIMIT 1), p.last_offset)
           END AS committed
      FROM queen.log_partitions p
     WHERE p.queue_id = $1 AND ($3::text IS NULL OR p.name = $3)),
moved AS (
    INSERT INTO queen.log_consumers AS c (partition_id, consumer_group, committed)
    SELECT t.id, $2, t.committed FROM target t
    ON CONFLICT (partition_id, consumer_group) DO UPDATE
       SET committed = excluded.committed, batch_end = NULL, worker_id = NULL,
           lease_expires_at = NULL, retry_count = 0, not_before = NULL
    RETURNING c.partition_id, c.committed)
SELECT t.name AS partition, m.committed FROM moved m JOIN target t ON t.id = m.partition_id
 ORDER BY t.name;

-- name: admin_set_subscription_timestamp
-- Store a new first-contact instant for every subscription of a group on the tenant's queues
-- (cursors untouched).
-- $1 consumer group, $2 timestamp, $3 tenant
UPDATE queen.consumer_subscriptions s
   SET mode = 'timestamp', subscription_from = $2
  FROM queen.queues q
 WHERE s.consumer_group = $1 AND q.id = s.queue_id AND q.tenant = $3;

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
-- $1 queue ids or null (every queue of the tenant), $2 tenant
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
 WHERE q.tenant = $2 AND ($1::bigint[] IS NULL OR p.queue_id = ANY($1::bigint[]))
 ORDER BY q.name, p.name;

-- name: admin_queue_row
-- A queue's row by name.
-- $1 queue name, $2 tenant
SELECT id, name, namespace, task, created_at, options::text AS options
  FROM queen.queues WHERE tenant = $2 AND name = $1;

-- name: admin_partitions_list
-- Partitions with their queue, optionally of one queue.
-- $1 queue name or null, $2 limit, $3 offset, $4 tenant
SELECT p.id, p.name, q.name AS queue, p.last_offset, p.log_start, p.last_write_at,
       p.created_at
  FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
 WHERE q.tenant = $4 AND ($1::text IS NULL OR q.name = $1)
 ORDER BY q.name, p.name
 LIMIT $2 OFFSET $3;

-- name: admin_overview
-- Counts for the overview and the metrics routes: of one tenant's queues, or (null) of
-- every queue.
-- $1 tenant or null
WITH q AS (SELECT id FROM queen.queues WHERE $1::text IS NULL OR tenant = $1),
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
