-- Statements of the DLQ and message-inspection routes (core/admin/dlq.py, core/admin/messages.py).
-- Loaded by core/storage/statements.py. DLQ rows are written by the ack (queen.ack); these
-- only read, replay and delete them. A statement that finds rows by queue name or by
-- address takes the caller's tenant (`:tenant`): a partition of another tenant's
-- queue is not found (migration 140).

-- name: dlq_page
-- One page of DLQ rows matching the filters, newest first, plus the number of all matching
-- rows (`total`, §13.4). The count row is always present: a page past the end answers one row
-- with total and null columns. A row written since version 23 has no payload columns but the
-- preserved copy of its segment (segment_base, segment_blob), from which the reader extracts
-- the message.
-- The page stops where the stored bytes of its rows (the payload, or the segment copy) pass
-- `max_bytes` (QUEEN_LIST_MAX_BYTES), its first row kept whatever its size: the answer says
-- so and where to go on (routes/dlq.py). octet_length reads a stored value's size from its
-- TOAST pointer: the rows left out are never read.
WITH matched AS MATERIALIZED (
    SELECT d.id, d.failed_at
      FROM queen.log_dlq d
      JOIN queen.log_partitions p ON p.id = d.partition_id
      JOIN queen.queues q ON q.id = p.queue_id
     WHERE q.tenant = :tenant
       AND (:queue::text IS NULL OR q.name = :queue)
       AND (:group::text IS NULL OR d.consumer_group = :group)
       AND (:partition::text IS NULL OR p.name = :partition)
       AND (:failed_from::timestamptz IS NULL OR d.failed_at >= :failed_from)
       AND (:failed_to::timestamptz IS NULL OR d.failed_at <= :failed_to)),
sized AS (
    SELECT m.id, m.failed_at,
           coalesce(octet_length(d.payload), octet_length(ds.blob), 0) AS size
      FROM (SELECT id, failed_at FROM matched
             ORDER BY failed_at DESC, id DESC LIMIT :limit OFFSET :offset) m
      JOIN queen.log_dlq d ON d.id = m.id
      LEFT JOIN queen.log_dlq_segments ds
        ON ds.partition_id = d.partition_id AND ds.base_offset = d.segment_base),
kept AS (
    SELECT s.id FROM (
        SELECT id, row_number() OVER w AS k, sum(size) OVER w AS upto
          FROM sized WINDOW w AS (ORDER BY failed_at DESC, id DESC)) s
     WHERE s.k = 1 OR s.upto <= :max_bytes::bigint),
page AS (
    SELECT d.id, d.partition_id, q.name AS queue, p.name AS partition, d.consumer_group,
           d.msg_offset, d.transaction_id, d.message_id, d.trace_id, d.producer_sub,
           d.payload, d.segment_base, ds.blob AS segment_blob, d.error_message,
           d.retry_count, d.created_at, d.failed_at
      FROM kept m
      JOIN queen.log_dlq d ON d.id = m.id
      JOIN queen.log_partitions p ON p.id = d.partition_id
      JOIN queen.queues q ON q.id = p.queue_id
      LEFT JOIN queen.log_dlq_segments ds
        ON ds.partition_id = d.partition_id AND ds.base_offset = d.segment_base)
SELECT page.*, t.total
  FROM (SELECT count(*) AS total FROM matched) t
  LEFT JOIN page ON true
 ORDER BY page.failed_at DESC, page.id DESC;

-- name: dlq_rows
-- DLQ rows of a partition of the tenant's queues, newest first, with their queue, partition
-- and preserved segment copy: the row of an id, or the rows of a message address (the other
-- parameter null).
SELECT d.id, d.partition_id, q.name AS queue, p.name AS partition, d.consumer_group,
       d.msg_offset, d.transaction_id, d.message_id, d.trace_id, d.producer_sub, d.payload,
       d.segment_base, ds.blob AS segment_blob, d.error_message, d.retry_count,
       d.created_at, d.failed_at
  FROM queen.log_dlq d
  JOIN queen.log_partitions p ON p.id = d.partition_id
  JOIN queen.queues q ON q.id = p.queue_id
  LEFT JOIN queen.log_dlq_segments ds
    ON ds.partition_id = d.partition_id AND ds.base_offset = d.segment_base
 WHERE d.partition_id = :partition_id AND q.tenant = :tenant
   AND (d.id = :dlq_id OR d.transaction_id = :transaction_id)
 ORDER BY d.failed_at DESC, d.id DESC;

-- name: dlq_lock
-- The first of `dlq_rows`, locked for replay: the row of an id, or the newest of an address
-- (any group). Concurrent replays (or a purge) of one row queue up here; the loser finds no
-- row (on Citus, with the placement held first: `dlq_hold_placement`).
-- extends: dlq_rows
 LIMIT 1
   FOR UPDATE OF d;

-- name: dlq_hold_placement
-- Before a replay locks a dead letter (`dlq_lock`) on Citus: keep the placement of the
-- letter's shard fixed until the transaction ends (queen.hold_placement). Citus makes a
-- shard move wait for writes, not for reads: a row locked on the old copy while a move
-- blocked writes was deleted by one replay on the new copy after the cutover, and another
-- replay, waiting for that lock on the old copy, then found the row unchanged there and
-- replayed the letter again. A statement of its own: Citus picks a statement's placement
-- before it runs it.
SELECT queen.hold_placement(:partition_id);

-- name: dlq_delete
-- Remove DLQ rows of a partition: one by id, or every row of an address; answers each
-- removed row with the segment copy it referred to.
DELETE FROM queen.log_dlq d
 WHERE d.partition_id = :partition_id
   AND (:row_id::bigint IS NULL OR d.id = :row_id)
   AND (:transaction_id::text IS NULL OR d.transaction_id = :transaction_id)
RETURNING d.id, d.segment_base;

-- name: dlq_lock_copies
-- Lock segment copies before deciding whether they are still referenced: an ack adding a
-- dead letter to a copy holds the same lock until it commits, so the check that follows (a
-- statement of its own, with a snapshot taken after the lock) sees that dead letter.
SELECT s.base_offset FROM queen.log_dlq_segments s
 WHERE s.partition_id = :partition_id AND s.base_offset = ANY(:bases::bigint[])
 ORDER BY s.base_offset
   FOR UPDATE;

-- name: dlq_drop_copies
-- Remove the locked segment copies no dead letter refers to any more.
DELETE FROM queen.log_dlq_segments s
 WHERE s.partition_id = :partition_id AND s.base_offset = ANY(:bases::bigint[])
   AND NOT EXISTS (SELECT 1 FROM queen.log_dlq d
                    WHERE d.partition_id = s.partition_id AND d.segment_base = s.base_offset);

-- name: message_partition
-- A partition of the tenant's queues with its queue, by id, for message inspection.
SELECT p.id, p.name, p.last_offset, p.log_start, q.id AS queue_id, q.name AS queue,
       q.namespace, q.task, q.options::text AS options
  FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
 WHERE p.id = :partition_id AND q.tenant = :tenant;

-- name: message_offsets
-- Retained offsets (from `log_start` on) of a transactionId in a partition, through the
-- index, oldest first.
SELECT msg_offset FROM queen.log_txn_index
 WHERE partition_id = :partition_id AND txn_key = queen.txn_key(:transaction_id)
   AND msg_offset >= :log_start
 ORDER BY msg_offset;

-- name: message_segments_newest
-- Segments of a partition from the newest backwards, below an exclusive base offset bound;
-- used to find messages whose index rows were pruned and to list recent messages.
-- At most `limit` segments, and fewer where their stored bytes pass `max_bytes`
-- (QUEEN_LIST_MAX_BYTES), the first kept whatever its size: a segment may hold a 16 MiB
-- message, and a page of them must not be held whole. octet_length reads a stored value's
-- size from its TOAST pointer: the segments left out are never read.
WITH newest AS (
    SELECT base_offset, octet_length(blob) AS size
      FROM queen.log_segments
     WHERE partition_id = :partition_id AND base_offset < :below
     ORDER BY base_offset DESC
     LIMIT :limit),
kept AS (
    SELECT n.base_offset FROM (
        SELECT base_offset, row_number() OVER w AS k, sum(size) OVER w AS upto
          FROM newest WINDOW w AS (ORDER BY base_offset DESC)) n
     WHERE n.k = 1 OR n.upto <= :max_bytes::bigint)
SELECT s.base_offset, s.last_offset, s.created_at, s.blob
  FROM kept k
  JOIN queen.log_segments s ON s.partition_id = :partition_id AND s.base_offset = k.base_offset
 ORDER BY s.base_offset DESC;

-- name: message_cursors
-- Every group's cursor on a partition, with whether its lease is live (database clock).
SELECT consumer_group, committed, batch_end, worker_id, lease_expires_at, retry_count,
       (worker_id IS NOT NULL AND lease_expires_at > now()) AS lease_live
  FROM queen.log_consumers
 WHERE partition_id = :partition_id
 ORDER BY consumer_group;

-- name: message_list_partitions
-- Partitions whose messages a listing walks, newest writes first.
SELECT p.id, p.name, p.last_offset, p.log_start, q.name AS queue, q.namespace, q.task,
       (q.options ->> 'priority')::integer AS priority
  FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
 WHERE q.tenant = :tenant
   AND (:queue::text IS NULL OR q.name = :queue)
   AND (:partition::text IS NULL OR p.name = :partition)
   AND (:namespace::text IS NULL OR q.namespace = :namespace)
   AND (:task::text IS NULL OR q.task = :task)
   AND p.last_offset >= p.log_start
 ORDER BY p.last_write_at DESC NULLS LAST, p.id
 LIMIT :limit;

-- name: dlq_partition_of
-- The partition of a DLQ row, by the row's own id (null when there is none). Read without a
-- lock, so that the lock that follows (`dlq_lock`) names the partition: on Citus the rows
-- are distributed by partition, and a row lock searching every shard is refused. (A row's
-- partition never changes; the lock reads the row again, after the placement is held.)
SELECT partition_id FROM queen.log_dlq WHERE id = :dlq_id;

-- name: dlq_purge_batch
-- Up to `batch` DLQ rows of a queue (of one consumer group, or of all), oldest id first: what
-- one pass of a purge deletes (dlq_purge_rows, one partition at a time).
SELECT x.partition_id, x.id
  FROM queen.log_dlq x
  JOIN queen.log_partitions p ON p.id = x.partition_id
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE q.tenant = :tenant AND q.name = :queue
   AND (:group::text IS NULL OR x.consumer_group = :group)
 ORDER BY x.id
 LIMIT :batch;

-- name: dlq_purge_rows
-- Remove DLQ rows of one partition by id; answers each removed row's partition and the
-- segment copy it referred to. A row a replay holds is waited for, and skipped when the
-- replay removed it.
DELETE FROM queen.log_dlq d
 WHERE d.partition_id = :partition_id AND d.id = ANY(:ids::bigint[])
RETURNING d.partition_id, d.segment_base;
