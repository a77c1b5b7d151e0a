-- Statements of the write path and of queue management. Loaded by core/storage/statements.py.
-- The calls with a route each have a twin that runs where it is received, for a call with
-- no shard named (`Routed` in core/storage/statements.py writes it).

-- name: partition_ids
-- The ids of partitions by name, created with their queue when missing (see
-- functions/20_append.sql). $1 tenants, $2 queues, $3 partitions, $4 namespaces, $5 tasks
-- (one per partition, in name order), $6 default options (jsonb text)
SELECT queue_id, partition_id
  FROM queen.partition_ids($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                           $6::jsonb);

-- name: partition_lookup
-- A partition's id by name, creating nothing: no row when the tenant has no such queue, a
-- null partition_id when the queue exists and the partition does not. Reads the directory
-- only (a reference table on Citus: any node answers it alone).
-- $1 tenant, $2 queue name, $3 partition name
SELECT q.id AS queue_id, d.partition_id
  FROM queen.queues q
  LEFT JOIN queen.partition_directory d ON d.queue_id = q.id AND d.name = $3
 WHERE q.tenant = $1 AND q.name = $2;

-- name: append_partitions
-- Append segments to partitions (of one shard, on Citus), or report duplicates (see
-- functions/20_append.sql for the arguments and the answer).
-- $1 route (null: one PostgreSQL), $2 each queue's tenant, $3 the ids remembered (0: none),
-- $4 queues, $5 partitions, $6 namespaces, $7 tasks (one per partition), $8 default
-- options (jsonb text), $9 segments per partition, $10 frames per segment, $11 blobs,
-- $12 transactionIds (flat), $13 whether each partition's transactionIds repeat, $14 whether
-- its segments are sealed
SELECT queue_id, partition_id, base_offset, created_at, dup_positions, dup_offsets, encrypted
  FROM queen.append_partitions($1::bigint, $2::text[], $3::bigint[], $4::text[], $5::text[],
                               $6::text[], $7::text[], $8::jsonb, $9::integer[],
                               $10::integer[], $11::bytea[], $12::text[], $13::boolean[],
                               $14::boolean[]);

-- name: append_partitions_joined
-- append_partitions with $12, the transactionIds, sent as one text: each preceded by U+001F
-- (which no transactionId holds then: core/storage/joined.py), so the driver encodes one
-- value instead of an array of a flush's hundreds.
SELECT queue_id, partition_id, base_offset, created_at, dup_positions, dup_offsets, encrypted
  FROM queen.append_partitions($1::bigint, $2::text[], $3::bigint[], $4::text[], $5::text[],
                               $6::text[], $7::text[], $8::jsonb, $9::integer[],
                               $10::integer[], $11::bytea[],
                               (string_to_array($12::text, E'\x1f'))[2:], $13::boolean[],
                               $14::boolean[]);

-- name: segments_at
-- The segments holding the given offsets of a partition (each once, in offset order).
-- $1 partition id, $2 offsets
SELECT DISTINCT s.base_offset, s.created_at, s.blob
  FROM unnest($2::bigint[]) AS o(at)
  CROSS JOIN LATERAL (
        SELECT x.base_offset, x.created_at, x.blob FROM queen.log_segments x
         WHERE x.partition_id = $1 AND x.base_offset <= o.at AND x.last_offset >= o.at) s
 ORDER BY s.base_offset;

-- name: lock_queue
-- The queue's row for configure, locked so concurrent configures merge one after another.
-- $1 queue name, $2 tenant
SELECT id, namespace, task, options::text AS options
  FROM queen.queues WHERE tenant = $2 AND name = $1 FOR UPDATE;

-- name: insert_queue
-- Create a queue if absent (configure); does nothing when another writer won the race.
-- $1 name, $2 namespace, $3 task, $4 options (jsonb text), $5 tenant
INSERT INTO queen.queues (tenant, name, namespace, task, options)
VALUES ($5, $1, $2, $3, $4::jsonb)
ON CONFLICT (tenant, name) DO NOTHING;

-- name: update_queue
-- Store a queue's effective namespace, task and options.
-- $1 queue id, $2 namespace, $3 task, $4 options (jsonb text)
UPDATE queen.queues SET namespace = $2, task = $3, options = $4::jsonb WHERE id = $1;

-- name: delete_queue_row
-- Remove the queue row; answers its id (nothing when absent).
-- $1 queue name, $2 tenant
DELETE FROM queen.queues WHERE tenant = $2 AND name = $1 RETURNING id;

-- name: delete_queue_directory
-- Remove a queue's partitions from the directory (pushes then create them afresh).
-- $1 queue id
DELETE FROM queen.partition_directory WHERE queue_id = $1;

-- name: delete_queue_partitions
-- Remove a queue's partitions; answers their ids. Waits for appends in flight (their row
-- locks); an append that comes later creates the queue afresh.
-- $1 queue id
DELETE FROM queen.log_partitions WHERE queue_id = $1 RETURNING id;

-- name: delete_partition_data
-- Remove everything partitions own: segments, index, cursors, dead letters, stream state
-- (migrations/080_streams.sql). A statement of its own after delete_queue_partitions, so its
-- snapshot sees what appends that finished meanwhile wrote.
-- $1 partition ids
WITH s AS (DELETE FROM queen.log_segments WHERE partition_id = ANY($1::bigint[])),
     t AS (DELETE FROM queen.log_txn_index WHERE partition_id = ANY($1::bigint[])),
     tp AS (DELETE FROM queen.log_txn_pruned WHERE partition_id = ANY($1::bigint[])),
     c AS (DELETE FROM queen.log_consumers WHERE partition_id = ANY($1::bigint[])),
     d AS (DELETE FROM queen.log_dlq WHERE partition_id = ANY($1::bigint[])),
     st AS (DELETE FROM queen.stream_state WHERE partition_id = ANY($1::bigint[])),
     sp AS (DELETE FROM queen.stream_partitions WHERE partition_id = ANY($1::bigint[]))
DELETE FROM queen.log_dlq_segments WHERE partition_id = ANY($1::bigint[]);

-- name: delete_queue_subscriptions
-- Remove stored consumer-group subscriptions of a queue.
-- $1 queue id
DELETE FROM queen.consumer_subscriptions WHERE queue_id = $1;
