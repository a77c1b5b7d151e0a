-- Statements of the write path and of queue management. Loaded by core/storage/statements.py.
-- Each call with a `route` has a twin `<name>_here` for a call with no shard named, which the
-- loader derives from its `-- here:` line: the route given by a subquery instead (`Routed` in
-- core/storage/statements.py).

-- name: partition_ids
-- The ids of partitions by name, created with their queue when missing (see
-- functions/20_append.sql): one tenant, queue, partition, namespace and task per partition,
-- in name order; `default_options` as jsonb text.
SELECT queue_id, partition_id
  FROM queen.partition_ids(:tenants::text[], :queues::text[], :partitions::text[],
                           :namespaces::text[], :tasks::text[], :default_options::jsonb);

-- name: partition_lookup
-- A partition's id by name, creating nothing: no row when the tenant has no such queue, a
-- null partition_id when the queue exists and the partition does not. Reads the directory
-- only (a reference table on Citus: any node answers it alone).
SELECT q.id AS queue_id, d.partition_id
  FROM queen.queues q
  LEFT JOIN queen.partition_directory d ON d.queue_id = q.id AND d.name = :partition
 WHERE q.tenant = :tenant AND q.name = :queue;

-- name: append_partitions
-- Append segments to partitions (of one shard, on Citus), or report duplicates (see
-- functions/20_append.sql for the arguments and the answer). `route`: the shard's (null:
-- one PostgreSQL); per partition its queue's tenant, the id remembered (0: none), queue,
-- partition, namespace, task, its count of segments (`segments`), whether its
-- transactionIds repeat and whether its segments are sealed; per segment its count of frames
-- (`frames`) and blob; the transactionIds flat; `default_options` as jsonb text.
-- here: (SELECT :route::bigint)
SELECT queue_id, partition_id, base_offset, created_at, dup_positions, dup_offsets, encrypted
  FROM queen.append_partitions(:route::bigint, :tenants::text[], :partition_ids::bigint[],
                               :queues::text[], :partitions::text[], :namespaces::text[],
                               :tasks::text[], :default_options::jsonb, :segments::integer[],
                               :frames::integer[], :blobs::bytea[],
                               :transaction_ids::text[], :repeats::boolean[],
                               :encrypted::boolean[]);

-- name: append_partitions_joined
-- append_partitions with the transactionIds sent as one text: each preceded by U+001F
-- (which no transactionId holds then: core/storage/joined.py), so the driver encodes one
-- value instead of an array of a flush's hundreds.
-- here: (SELECT :route::bigint)
SELECT queue_id, partition_id, base_offset, created_at, dup_positions, dup_offsets, encrypted
  FROM queen.append_partitions(:route::bigint, :tenants::text[], :partition_ids::bigint[],
                               :queues::text[], :partitions::text[], :namespaces::text[],
                               :tasks::text[], :default_options::jsonb, :segments::integer[],
                               :frames::integer[], :blobs::bytea[],
                               (string_to_array(:transaction_ids::text, E'\x1f'))[2:],
                               :repeats::boolean[], :encrypted::boolean[]);

-- name: segments_at
-- The segments holding the given offsets of a partition (each once, in offset order).
SELECT DISTINCT s.base_offset, s.created_at, s.blob
  FROM unnest(:offsets::bigint[]) AS o(at)
  CROSS JOIN LATERAL (
        SELECT x.base_offset, x.created_at, x.blob FROM queen.log_segments x
         WHERE x.partition_id = :partition_id AND x.base_offset <= o.at
           AND x.last_offset >= o.at) s
 ORDER BY s.base_offset;

-- name: lock_queue
-- The queue's row for configure, locked so concurrent configures merge one after another.
SELECT id, namespace, task, options::text AS options
  FROM queen.queues WHERE tenant = :tenant AND name = :name FOR UPDATE;

-- name: insert_queue
-- Create a queue if absent (configure); does nothing when another writer won the race.
-- `options`: jsonb text.
INSERT INTO queen.queues (tenant, name, namespace, task, options)
VALUES (:tenant, :name, :namespace, :task, :options::jsonb)
ON CONFLICT (tenant, name) DO NOTHING;

-- name: update_queue
-- Store a queue's effective namespace, task and options (jsonb text).
UPDATE queen.queues SET namespace = :namespace, task = :task, options = :options::jsonb
 WHERE id = :queue_id;

-- name: delete_queue_row
-- Remove the queue row; answers its id (nothing when absent).
DELETE FROM queen.queues WHERE tenant = :tenant AND name = :name RETURNING id;

-- name: delete_queue_directory
-- Remove a queue's partitions from the directory (pushes then create them afresh).
DELETE FROM queen.partition_directory WHERE queue_id = :queue_id;

-- name: delete_queue_partitions
-- Remove a queue's partitions; answers their ids. Waits for appends in flight (their row
-- locks); an append that comes later creates the queue afresh.
DELETE FROM queen.log_partitions WHERE queue_id = :queue_id RETURNING id;

-- name: delete_partition_data
-- Remove everything partitions own: segments, index, cursors, dead letters, stream state
-- (migrations/080_streams.sql). A statement of its own after delete_queue_partitions, so its
-- snapshot sees what appends that finished meanwhile wrote.
WITH s AS (DELETE FROM queen.log_segments WHERE partition_id = ANY(:partition_ids::bigint[])),
     t AS (DELETE FROM queen.log_txn_index WHERE partition_id = ANY(:partition_ids::bigint[])),
     tp AS (DELETE FROM queen.log_txn_pruned
             WHERE partition_id = ANY(:partition_ids::bigint[])),
     c AS (DELETE FROM queen.log_consumers WHERE partition_id = ANY(:partition_ids::bigint[])),
     d AS (DELETE FROM queen.log_dlq WHERE partition_id = ANY(:partition_ids::bigint[])),
     st AS (DELETE FROM queen.stream_state WHERE partition_id = ANY(:partition_ids::bigint[])),
     sp AS (DELETE FROM queen.stream_partitions
             WHERE partition_id = ANY(:partition_ids::bigint[]))
DELETE FROM queen.log_dlq_segments WHERE partition_id = ANY(:partition_ids::bigint[]);

-- name: delete_queue_subscriptions
-- Remove stored consumer-group subscriptions of a queue.
DELETE FROM queen.consumer_subscriptions WHERE queue_id = :queue_id;
