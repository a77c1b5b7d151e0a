-- Statements of the read path: pop (claim under a lease), ack, lease extension.
-- Loaded by core/queries.py. A lease is live iff worker_id IS NOT NULL AND
-- lease_expires_at > now(); every lease decision uses the database clock.

-- name: pop_queue_by_name
-- The queue a pop addresses, with the group's stored subscription if any.
-- $1 queue name, $2 consumer group
SELECT q.id, q.name, q.options::text AS options, s.mode AS sub_mode,
       s.subscription_from AS sub_from
  FROM queen.queues q
  LEFT JOIN queen.consumer_subscriptions s ON s.queue_id = q.id AND s.consumer_group = $2
 WHERE q.name = $1;

-- name: pop_queues_by_namespace_task
-- Queues of a discovery pop: namespace and/or task match (null = any).
-- $1 namespace or null, $2 task or null, $3 consumer group
SELECT q.id, q.name, q.options::text AS options, s.mode AS sub_mode,
       s.subscription_from AS sub_from
  FROM queen.queues q
  LEFT JOIN queen.consumer_subscriptions s ON s.queue_id = q.id AND s.consumer_group = $3
 WHERE ($1::text IS NULL OR q.namespace = $1) AND ($2::text IS NULL OR q.task = $2);

-- name: store_subscription
-- Remember a named group's first-contact choice for a queue; first writer wins. Answers the
-- stored row (the existing one if another pop stored it first).
-- The no-op DO UPDATE (not DO NOTHING + a SELECT) is deliberate: when a concurrent first pop
-- inserts the row and commits while this statement waits on it, a SELECT in the same
-- statement still reads the old snapshot and finds nothing; DO UPDATE returns the committed
-- row (tests/integration/test_invariants.py, the concurrent-claim race).
-- $1 queue id, $2 group, $3 mode (all|new|timestamp), $4 instant for new/timestamp
INSERT INTO queen.consumer_subscriptions AS s (queue_id, consumer_group, mode, subscription_from)
VALUES ($1, $2, $3, coalesce($4, now()))
ON CONFLICT (queue_id, consumer_group) DO UPDATE SET mode = s.mode
RETURNING s.mode, s.subscription_from;

-- name: pop_candidates
-- Partitions that may have something for the group (queen.pop_eligible, 005_pop_eligible.sql).
-- Nothing is locked here; pop_lock_cursors and pop_create_cursors then take each candidate
-- or skip it if another pop was faster. The walk starts at a random pivot and wraps around,
-- so concurrent pops spread over the partitions and every partition gets its turn.
-- $1 queue ids, $2 group, $3 partition name or null (any), $4 candidate limit,
-- $5 pivot in [0, 1)
WITH bounds AS (
    SELECT min(b.id) AS lo, max(b.id) AS hi FROM queen.log_partitions b
     WHERE b.queue_id = ANY($1::bigint[])),
pivot AS (
    SELECT lo, hi, lo + floor($5::float8 * (hi - lo + 1))::bigint AS at FROM bounds)
(SELECT e.* FROM pivot, queen.pop_eligible($1::bigint[], $2, $3, pivot.at, pivot.hi + 1, $4) e)
UNION ALL
(SELECT e.* FROM pivot, queen.pop_eligible($1::bigint[], $2, $3, pivot.lo, pivot.at, $4) e)
LIMIT $4;

-- name: pop_lock_cursors
-- Lock the existing cursors among the candidates that are still claimable, skipping any a
-- concurrent pop holds: two pops never get the same (partition, group).
-- $1 partition ids, $2 group
SELECT c.partition_id, c.committed, c.retry_count
  FROM queen.log_consumers c
  JOIN queen.log_partitions p ON p.id = c.partition_id
 WHERE c.partition_id = ANY($1::bigint[]) AND c.consumer_group = $2
   AND c.committed < p.last_offset
   AND (c.worker_id IS NULL OR c.lease_expires_at <= now())
   FOR UPDATE OF c SKIP LOCKED;

-- name: pop_create_cursors
-- First contact: create the group's cursors on these partitions, seeded by the subscription
-- rule of each partition's queue. A row another pop created first is skipped (DO NOTHING).
-- Seeds: all = before the oldest retained offset; new = at the last offset;
-- timestamp = the last offset of the newest segment created before the instant (segments
-- share one created_at for all their messages, so this is exact per message).
-- $1 partition ids, $2 group, $3 seed modes (all|new|timestamp) per partition,
-- $4 instants per partition (null unless timestamp)
INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
SELECT p.id, $2,
       CASE w.mode
         WHEN 'new' THEN p.last_offset
         WHEN 'timestamp' THEN greatest(p.log_start - 1, coalesce(
              (SELECT s.last_offset FROM queen.log_segments s
                WHERE s.partition_id = p.id AND s.created_at < w.instant
                ORDER BY s.base_offset DESC LIMIT 1), p.log_start - 1))
         ELSE p.log_start - 1
       END
  FROM unnest($1::bigint[], $3::text[], $4::timestamptz[]) AS w(partition_id, mode, instant)
  JOIN queen.log_partitions p ON p.id = w.partition_id
ON CONFLICT (partition_id, consumer_group) DO NOTHING
RETURNING partition_id, committed, retry_count;

-- name: pop_read_segments
-- Segments overlapping each wanted span [lo, hi], in offset order per partition, limited to
-- segments old enough for the queue's delayedProcessing (seconds, 0 = none).
-- $1 partition ids, $2 span starts, $3 span ends, $4 delay seconds per partition
SELECT s.partition_id, s.base_offset, s.created_at, s.blob
  FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::integer[]) AS w(pid, lo, hi, delay)
  CROSS JOIN LATERAL (
        SELECT x.partition_id, x.base_offset, x.created_at, x.blob
          FROM queen.log_segments x
         WHERE x.partition_id = w.pid
           AND x.base_offset <= w.hi
           AND x.base_offset >= coalesce((SELECT max(y.base_offset) FROM queen.log_segments y
                                           WHERE y.partition_id = w.pid
                                             AND y.base_offset <= w.lo), w.lo)
           AND (w.delay = 0 OR x.created_at <= now() - make_interval(secs => w.delay))
         ORDER BY x.base_offset) s;

-- name: pop_take_leases
-- Lease the claimed spans: batch_end, the lease id and its expiry per partition.
-- $1 partition ids, $2 group, $3 span ends, $4 lease id, $5 lease seconds per partition
UPDATE queen.log_consumers c
   SET batch_end = w.hi, worker_id = $4,
       lease_expires_at = now() + make_interval(secs => w.secs),
       last_consumed_at = now()
  FROM unnest($1::bigint[], $3::bigint[], $5::integer[]) AS w(pid, hi, secs)
 WHERE c.partition_id = w.pid AND c.consumer_group = $2;

-- name: pop_auto_commit
-- autoAck: commit the delivered spans inside the pop's transaction; no lease.
-- $1 partition ids, $2 group, $3 span ends, $4 delivered counts
UPDATE queen.log_consumers c
   SET committed = w.hi, batch_end = NULL, worker_id = NULL, lease_expires_at = NULL,
       retry_count = 0, total_consumed = c.total_consumed + w.n, last_consumed_at = now()
  FROM unnest($1::bigint[], $3::bigint[], $4::integer[]) AS w(pid, hi, n)
 WHERE c.partition_id = w.pid AND c.consumer_group = $2;

-- name: extend_lease
-- Extend every live lease of a lease id; expired or released leases are not revived.
-- $1 lease id, $2 seconds
UPDATE queen.log_consumers
   SET lease_expires_at = greatest(lease_expires_at, now() + make_interval(secs => $2))
 WHERE worker_id = $1 AND lease_expires_at > now()
RETURNING lease_expires_at;

-- name: ack_lock_cursors
-- The group's cursors on the acked partitions, locked in partition order (a fixed order, so
-- concurrent multi-partition acks cannot deadlock), with what the ack rules need.
-- $1 partition ids, $2 group
SELECT c.partition_id, c.committed, c.batch_end, c.worker_id, c.retry_count,
       (c.worker_id IS NOT NULL AND c.lease_expires_at > now()) AS lease_live,
       p.last_offset, p.queue_id, q.options::text AS options
  FROM queen.log_consumers c
  JOIN queen.log_partitions p ON p.id = c.partition_id
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE c.partition_id = ANY($1::bigint[]) AND c.consumer_group = $2
 ORDER BY c.partition_id
   FOR UPDATE OF c;

-- name: ack_resolve
-- Every indexed occurrence of each (partition, transactionId).
-- $1 partition ids, $2 transactionIds (pairwise)
SELECT i.partition_id, i.transaction_id, i.msg_offset
  FROM unnest($1::bigint[], $2::text[]) AS w(pid, txid)
  JOIN queen.log_txn_index i
    ON i.partition_id = w.pid AND i.txn_hash = hashtextextended(w.txid, 0)
   AND i.transaction_id = w.txid;

-- name: ack_update_cursors
-- Apply the outcome of an ack per partition: new cursor, retry counter, lease kept or
-- released, messages completed.
-- $1 partition ids, $2 group, $3 new committed, $4 retry counts, $5 release lease (bool),
-- $6 newly completed counts
UPDATE queen.log_consumers c
   SET committed = w.committed,
       retry_count = w.retries,
       batch_end = CASE WHEN w.release THEN NULL ELSE c.batch_end END,
       worker_id = CASE WHEN w.release THEN NULL ELSE c.worker_id END,
       lease_expires_at = CASE WHEN w.release THEN NULL ELSE c.lease_expires_at END,
       total_consumed = c.total_consumed + w.done,
       last_consumed_at = CASE WHEN w.done > 0 THEN now() ELSE c.last_consumed_at END
  FROM unnest($1::bigint[], $3::bigint[], $4::integer[], $5::boolean[], $6::bigint[])
       AS w(pid, committed, retries, release, done)
 WHERE c.partition_id = w.pid AND c.consumer_group = $2;

-- name: insert_dlq
-- Dead-letter one message: a copy of its payload and the reason.
-- $1 partition id, $2 group, $3 offset, $4 transactionId, $5 message id, $6 trace id,
-- $7 producer sub, $8 payload bytes, $9 error text, $10 retry count, $11 appended at
INSERT INTO queen.log_dlq (partition_id, consumer_group, msg_offset, transaction_id, message_id,
                           trace_id, producer_sub, payload, error_message, retry_count,
                           created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);


-- name: pop_hinted_candidates
-- The partitions a wake-up named, shaped like pop_candidates' rows, found by primary key
-- instead of a scan. Whether each can still be claimed is checked when its cursor is locked
-- (pop_lock_cursors) or created (pop_create_cursors). Callers skip this for queues with a
-- windowBuffer, which only pop_candidates applies.
-- $1 partition ids, $2 queue ids, $3 group, $4 partition name or null (any)
SELECT p.id AS partition_id, p.queue_id, p.name, p.last_offset,
       NOT EXISTS (SELECT 1 FROM queen.log_consumers c
                    WHERE c.partition_id = p.id AND c.consumer_group = $3) AS fresh
  FROM queen.log_partitions p
 WHERE p.id = ANY($1::bigint[]) AND p.queue_id = ANY($2::bigint[])
   AND ($4::text IS NULL OR p.name = $4)
   AND p.last_offset >= p.log_start;
