-- Statements of the DLQ and message-inspection routes (core/dlq.py, core/messages.py).
-- Loaded by core/queries.py. DLQ rows are written by the ack path; these only read, replay
-- and delete them.

-- name: dlq_page
-- One page of DLQ rows matching the filters, newest first, plus the number of all matching
-- rows (`total`, §13.4). The count row is always present: a page past the end answers one row
-- with total and null columns.
-- $1 queue name or null, $2 consumer group or null, $3 partition name or null,
-- $4 failed at or after (or null), $5 failed at or before (or null), $6 limit, $7 offset
WITH matched AS MATERIALIZED (
    SELECT d.id, d.partition_id, d.consumer_group, d.msg_offset, d.transaction_id,
           d.message_id, d.trace_id, d.producer_sub, d.payload, d.error_message,
           d.retry_count, d.created_at, d.failed_at, q.name AS queue, p.name AS partition
      FROM queen.log_dlq d
      JOIN queen.log_partitions p ON p.id = d.partition_id
      JOIN queen.queues q ON q.id = p.queue_id
     WHERE ($1::text IS NULL OR q.name = $1)
       AND ($2::text IS NULL OR d.consumer_group = $2)
       AND ($3::text IS NULL OR p.name = $3)
       AND ($4::timestamptz IS NULL OR d.failed_at >= $4)
       AND ($5::timestamptz IS NULL OR d.failed_at <= $5)),
page AS (
    SELECT * FROM matched ORDER BY failed_at DESC, id DESC LIMIT $6 OFFSET $7)
SELECT t.total, page.*
  FROM (SELECT count(*) AS total FROM matched) t
  LEFT JOIN page ON true
 ORDER BY page.failed_at DESC, page.id DESC;

-- name: dlq_lock_newest
-- The newest DLQ row of a message address (any group), locked for replay, with its queue and
-- partition. Concurrent replays of one address queue up here; the loser finds no row.
-- $1 partition id, $2 transactionId
SELECT d.id, d.partition_id, d.consumer_group, d.transaction_id, d.message_id, d.trace_id,
       d.producer_sub, d.payload, q.id AS queue_id, q.name AS queue, p.name AS partition
  FROM queen.log_dlq d
  JOIN queen.log_partitions p ON p.id = d.partition_id
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE d.partition_id = $1 AND d.transaction_id = $2
 ORDER BY d.failed_at DESC, d.id DESC
 LIMIT 1
   FOR UPDATE OF d;

-- name: dlq_delete_row
-- Remove one DLQ row by id.
-- $1 DLQ row id
DELETE FROM queen.log_dlq WHERE id = $1;

-- name: dlq_delete_address
-- Remove every DLQ row of a message address; answers the ids removed.
-- $1 partition id, $2 transactionId
DELETE FROM queen.log_dlq WHERE partition_id = $1 AND transaction_id = $2 RETURNING id;

-- name: dlq_rows_for_address
-- DLQ rows of a message address, newest first.
-- $1 partition id, $2 transactionId
SELECT id, consumer_group, msg_offset, message_id, trace_id, producer_sub, payload,
       error_message, retry_count, created_at, failed_at
  FROM queen.log_dlq
 WHERE partition_id = $1 AND transaction_id = $2
 ORDER BY failed_at DESC, id DESC;

-- name: message_partition
-- A partition with its queue, by id, for message inspection.
-- $1 partition id
SELECT p.id, p.name, p.last_offset, p.log_start, q.id AS queue_id, q.name AS queue,
       q.namespace, q.task, q.options::text AS options
  FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
 WHERE p.id = $1;

-- name: message_offsets
-- Retained offsets of a transactionId in a partition, through the index, oldest first.
-- $1 partition id, $2 transactionId, $3 first retained offset
SELECT msg_offset FROM queen.log_txn_index
 WHERE partition_id = $1 AND txn_hash = hashtextextended($2, 0) AND transaction_id = $2
   AND msg_offset >= $3
 ORDER BY msg_offset;

-- name: message_segments_newest
-- Segments of a partition from the newest backwards, below an exclusive base offset bound;
-- used to find messages whose index rows were pruned and to list recent messages.
-- $1 partition id, $2 exclusive upper bound on base_offset, $3 limit
SELECT base_offset, last_offset, created_at, blob
  FROM queen.log_segments
 WHERE partition_id = $1 AND base_offset < $2
 ORDER BY base_offset DESC
 LIMIT $3;

-- name: message_cursors
-- Every group's cursor on a partition, with whether its lease is live (database clock).
-- $1 partition id
SELECT consumer_group, committed, batch_end, worker_id, lease_expires_at, retry_count,
       (worker_id IS NOT NULL AND lease_expires_at > now()) AS lease_live
  FROM queen.log_consumers
 WHERE partition_id = $1
 ORDER BY consumer_group;

-- name: message_list_partitions
-- Partitions whose messages a listing walks, newest writes first.
-- $1 queue or null, $2 partition or null, $3 namespace or null, $4 task or null, $5 limit
SELECT p.id, p.name, p.last_offset, p.log_start, q.name AS queue, q.namespace, q.task,
       coalesce((q.options ->> 'priority')::integer, 0) AS priority
  FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
 WHERE ($1::text IS NULL OR q.name = $1)
   AND ($2::text IS NULL OR p.name = $2)
   AND ($3::text IS NULL OR q.namespace = $3)
   AND ($4::text IS NULL OR q.task = $4)
   AND p.last_offset >= p.log_start
 ORDER BY p.last_write_at DESC NULLS LAST, p.id
 LIMIT $5;
