-- The ready set's reseed (core/engine/ready): the only scan of a queue's partitions on the
-- read path, paged by partition id, run when a process may have missed a notification (a
-- lane's first use, a LISTEN reconnect, a notification that could not name every partition)
-- and as a periodic floor.

-- name: ready_partitions
-- part
-- The partitions that may hold data for a group: kept messages past the group's cursor, or
-- no cursor yet and something the claim's first contact would deliver, with the seconds
-- until a live lease, a retryDelay or a windowBuffer lets go of it (null or not above 0:
-- claimable now). The two statements below say which partitions they look at.
-- First contact seeds the cursor by the group's subscription (queen.pop_claim): from the
-- oldest message, or, for a group that subscribed `new` or from a timestamp, after the
-- segments written before its instant. So without a cursor, a partition last written
-- before that instant has nothing for the group. Counting it ready made a new group's first
-- pop claim every partition of the queue, eight at a time, to deliver nothing (41 s for
-- 20,000 partitions).
-- A windowBuffer holds a partition until that long after its last write: it gets that due,
-- as a lease gets its own. Found ready, it was claimed at every reseed to be answered
-- `later`, and a lane past its cap reseeds before each pop that finds nothing: every empty
-- pop of such a queue of 5,000 partitions claimed them all (2 s a pop). A delayedProcessing
-- queue's due needs the group's next segment: `ready_heads` gives it, for the partitions
-- this scan marks `delayed`.
SELECT p.id AS partition_id, p.name AS partition,
       extract(epoch FROM greatest(CASE WHEN c.worker_id IS NOT NULL
                                        THEN c.lease_expires_at END,
                                   c.not_before,
                                   p.last_write_at + make_interval(
                                       secs => (q.options ->> 'windowBuffer')::integer))
                          - clock_timestamp())::float8 AS due_in,
       coalesce((q.options ->> 'delayedProcessing')::integer > 0, false) AS delayed
  FROM queen.log_partitions p
  JOIN queen.queues q ON q.id = p.queue_id
  LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = :group
  LEFT JOIN queen.consumer_subscriptions s
    ON s.queue_id = p.queue_id AND s.consumer_group = :group
 WHERE p.last_offset >= p.log_start
   AND (c.committed < p.last_offset
        OR c.partition_id IS NULL
           AND (s.mode IS NULL OR s.mode = 'all' OR s.subscription_from IS NULL
                OR p.last_write_at >= s.subscription_from))

-- name: ready_scan
-- A page of a queue's `ready_partitions`: partition ids above `after`, at most `limit` of
-- them.
-- extends: ready_partitions
   AND p.queue_id = :queue_id
   AND p.id > :after
 ORDER BY p.id
 LIMIT :limit;

-- name: ready_directory
-- On Citus, the reseed's first step: a page of a queue's partitions from the directory (a
-- copy on every node), in id order; the broker then asks each shard about its own
-- (`ready_check`).
SELECT partition_id, name AS partition
  FROM queen.partition_directory
 WHERE queue_id = :queue_id AND partition_id > :after
 ORDER BY partition_id
 LIMIT :limit;

-- name: ready_check
-- On Citus, the reseed's second step: which of these partitions (all on one shard) are
-- `ready_partitions`. A list of ids of one shard is a statement on that shard (Citus prunes
-- by the list).
-- extends: ready_partitions
   AND p.id = ANY(:partition_ids::bigint[]);

-- name: ready_head
-- part
-- The reseed's second look at the partitions of a delayedProcessing queue it found ready: the
-- seconds until the group's next message is old enough (queen.pop_claim's `later`).
SELECT p.id AS partition_id,
       extract(epoch FROM h.created_at + make_interval(
                   secs => (q.options ->> 'delayedProcessing')::integer)
               - clock_timestamp())::float8 AS due_in
  FROM queen.log_partitions p
  JOIN queen.queues q ON q.id = p.queue_id
  LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = :group
  CROSS JOIN LATERAL (
        SELECT y.created_at FROM queen.log_segments y
         WHERE y.partition_id = p.id
           AND y.base_offset <= greatest(c.committed + 1, p.log_start)

-- name: ready_heads
-- `ready_head` of these partitions, on one PostgreSQL.
-- extends: ready_head
         ORDER BY y.base_offset DESC LIMIT 1) h
 WHERE p.id = ANY(:partition_ids::bigint[]);

-- name: ready_heads_on_shard
-- `ready_head` of these partitions, all on one shard of Citus. The segment lookup names the
-- ids too: with `y.partition_id = p.id` alone Citus sends the statement to every shard, and
-- with one node down the reseed fails for all of them. (Not on one PostgreSQL: there each
-- lookup would sort the whole list again, 0.16 ms a partition for 2,000 of them against
-- 0.001 without it.)
-- extends: ready_head
           AND y.partition_id = ANY(:partition_ids::bigint[])
         ORDER BY y.base_offset DESC LIMIT 1) h
 WHERE p.id = ANY(:partition_ids::bigint[]);

-- name: queue_partition_ids
-- The ids of a queue's partitions, in id order: the storage ceiling's candidates
-- (loadtest/ceiling_sql.py), which has no ready set.
SELECT p.id
  FROM queen.log_partitions p
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE q.tenant = :tenant AND q.name = :queue
 ORDER BY p.id;
