-- Statements of the write path and of queue management. Loaded by core/queries.py.

-- name: ensure_partition
-- Create queue and partition when missing; answer (queue_id, partition_id).
-- $1 queue name, $2 partition name, $3 namespace, $4 task, $5 default options (jsonb text)
SELECT queue_id, partition_id FROM queen.ensure_partition($1, $2, $3, $4, $5::jsonb);

-- name: append_segment
-- Append one segment under the partition lock, or report duplicates (see 002_append.sql).
-- $1 partition id, $2 transactionIds, $3 message ids, $4 zstd blob
SELECT base_offset, created_at, dup_positions, dup_message_ids
  FROM queen.append_segment($1, $2::text[], $3::uuid[], $4);

-- name: lock_queue_options
-- The queue's row for configure, locked so concurrent configures merge one after another.
-- $1 queue name
SELECT id, namespace, task, options::text AS options FROM queen.queues WHERE name = $1 FOR UPDATE;

-- name: insert_queue
-- Create a queue if absent (configure); answers nothing when another writer won the race.
-- $1 name, $2 namespace, $3 task, $4 options (jsonb text)
INSERT INTO queen.queues (name, namespace, task, options)
VALUES ($1, $2, $3, $4::jsonb)
ON CONFLICT (name) DO NOTHING;

-- name: update_queue
-- Store a queue's effective namespace, task and options.
-- $1 queue id, $2 namespace, $3 task, $4 options (jsonb text)
UPDATE queen.queues SET namespace = $2, task = $3, options = $4::jsonb WHERE id = $1;

-- name: delete_queue_row
-- Remove the queue row; answers its id (nothing when absent).
-- $1 queue name
DELETE FROM queen.queues WHERE name = $1 RETURNING id;

-- name: delete_queue_partitions
-- Remove a queue's partitions; answers their ids. Waits for in-flight appends (row locks).
-- $1 queue id
DELETE FROM queen.log_partitions WHERE queue_id = $1 RETURNING id;

-- name: delete_partition_data
-- Remove everything partitions own: segments, index, cursors, dead letters.
-- $1 partition ids
WITH s AS (DELETE FROM queen.log_segments WHERE partition_id = ANY($1::bigint[])),
     t AS (DELETE FROM queen.log_txn_index WHERE partition_id = ANY($1::bigint[])),
     c AS (DELETE FROM queen.log_consumers WHERE partition_id = ANY($1::bigint[]))
DELETE FROM queen.log_dlq WHERE partition_id = ANY($1::bigint[]);

-- name: delete_queue_subscriptions
-- Remove stored consumer-group subscriptions of a queue.
-- $1 queue id
DELETE FROM queen.consumer_subscriptions WHERE queue_id = $1;

-- name: append_segments
-- One segment for each of several partitions, in one transaction (see 004_append_many.sql).
-- $1 partition ids (ascending), $2 items per partition, $3 transactionIds (flat),
-- $4 message ids (flat), $5 one zstd blob per partition
SELECT partition_id, base_offset, created_at, dup_positions, dup_message_ids
  FROM queen.append_segments($1::bigint[], $2::integer[], $3::text[], $4::uuid[], $5::bytea[]);
