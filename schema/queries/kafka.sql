-- Statements of the Kafka edge's core service (core/kafka). Topics are queues and groups are
-- consumer groups of one tenant (migration 140): the statements that name them take the
-- connection's tenant.

-- name: kafka_topics
-- Queues (all, or those `names` lists) with the partition count declared for Kafka (null: none)
-- and one past the highest partition named by a canonical decimal (null: none).
SELECT q.name, t.partitions AS declared,
       (SELECT max(d.name::bigint) + 1 FROM queen.partition_directory d
         WHERE d.queue_id = q.id AND d.name ~ '^(0|[1-9][0-9]{0,8})$') AS seen
  FROM queen.queues q
  LEFT JOIN queen.kafka_topics t ON t.queue_id = q.id
 WHERE q.tenant = :tenant AND (:names::text[] IS NULL OR q.name = ANY(:names::text[]))
 ORDER BY q.name;

-- name: kafka_declare
-- Record a queue's Kafka partition count unless one is recorded; answers the queue id when
-- this call recorded it (no row: the queue is unknown or already had a count).
INSERT INTO queen.kafka_topics (queue_id, partitions)
SELECT q.id, :partitions FROM queen.queues q WHERE q.tenant = :tenant AND q.name = :queue
    ON CONFLICT (queue_id) DO NOTHING
RETURNING queue_id;

-- name: kafka_offset_for_time
-- The first offset of a partition appended at or after `at` (segments carry one created_at for
-- all their messages, so the first such segment's base offset is exact), never below the
-- log start, with that segment's append time; no row when nothing is that recent.
SELECT greatest(s.base_offset, p.log_start) AS offset, s.created_at
  FROM queen.queues q
  JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = :partition
  JOIN queen.log_segments s ON s.partition_id = p.id
 WHERE q.tenant = :tenant AND q.name = :queue AND s.created_at >= :at
   AND s.last_offset >= p.log_start
 ORDER BY s.base_offset
 LIMIT 1;

-- name: kafka_commit
-- Set a group's cursors on partitions of a queue to `committed` (creating partitions and
-- cursors that do not exist), like a seek: any lease is released and the retry state reset.
-- `partitions` and `committed` go in the same order. Answers the partitions set, by name
-- (none when the queue is unknown).
WITH q AS (SELECT id, tenant, name, namespace, task, options FROM queen.queues
            WHERE tenant = :tenant AND name = :queue),
wanted AS (
    SELECT u.name, u.committed
      FROM unnest(:partitions::text[], :committed::bigint[]) AS u(name, committed)
     WHERE EXISTS (SELECT 1 FROM q)),
-- in name order, as every writer creates partitions (functions/20_append.sql)
names AS (SELECT array_agg(w.name ORDER BY w.name) AS list FROM wanted w),
parts AS (
    SELECT x.partition_id AS id, n.list[x.n] AS name
      FROM q, names n,
           queen.partition_ids(array_fill(q.tenant, ARRAY[cardinality(n.list)]),
                               array_fill(q.name, ARRAY[cardinality(n.list)]), n.list,
                               array_fill(q.namespace, ARRAY[cardinality(n.list)]),
                               array_fill(q.task, ARRAY[cardinality(n.list)]), q.options)
               WITH ORDINALITY AS x(queue_id, partition_id, n)
     WHERE cardinality(n.list) > 0),
target AS (
    SELECT parts.id, parts.name, w.committed
      FROM parts JOIN wanted w ON w.name = parts.name),
set AS (
    INSERT INTO queen.log_consumers AS c (partition_id, consumer_group, committed,
                                         last_consumed_at)
    SELECT t.id, :group, t.committed, now() FROM target t
        ON CONFLICT (partition_id, consumer_group) DO UPDATE
       SET committed = excluded.committed, batch_end = NULL, worker_id = NULL,
           lease_expires_at = NULL, retry_count = 0, not_before = NULL,
           last_consumed_at = excluded.last_consumed_at,  -- (Citus: no now() here)
           total_consumed = c.total_consumed + greatest(excluded.committed - c.committed, 0)
    RETURNING c.partition_id)
SELECT t.name FROM set JOIN target t ON t.id = set.partition_id;

-- name: kafka_committed
-- A group's cursors on a queue: partition name and committed offset.
SELECT p.name, c.committed
  FROM queen.queues q
  JOIN queen.log_partitions p ON p.queue_id = q.id
  JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = :group
 WHERE q.tenant = :tenant AND q.name = :queue;

-- name: kafka_group_names
-- Every consumer group with a cursor on a queue of the tenant.
SELECT DISTINCT c.consumer_group
  FROM queen.log_consumers c
  JOIN queen.log_partitions p ON p.id = c.partition_id
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE q.tenant = :tenant
 ORDER BY c.consumer_group;

-- name: kafka_new_producer_id
-- A producer id never handed out before.
SELECT nextval('queen.kafka_producer_ids');

-- name: kafka_group_positions
-- A group's cursors on every queue: queue name, partition name, committed offset.
SELECT q.name AS queue, p.name, c.committed
  FROM queen.log_consumers c
  JOIN queen.log_partitions p ON p.id = c.partition_id
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE c.consumer_group = :group AND q.tenant = :tenant;

-- name: kafka_claim_coordinator
-- Whether this connection holds (now) the session lock of a Kafka cluster's coordinator:
-- held until the connection closes, so a listener that dies or loses the server frees it.
SELECT pg_try_advisory_lock(hashtextextended('queen-kafka-coordinator:' || :cluster, 0));

-- name: kafka_record_coordinator
-- The lock holder records itself as its cluster's coordinator.
INSERT INTO queen.kafka_coordinators (cluster, node_id, host, port)
VALUES (:cluster, :node_id, :host, :port)
    ON CONFLICT (cluster) DO UPDATE
   SET node_id = excluded.node_id, host = excluded.host, port = excluded.port,
       elected_at = now();

-- name: kafka_coordinator
-- A cluster's coordinator as last recorded (no row: none elected yet).
SELECT node_id, host, port FROM queen.kafka_coordinators WHERE cluster = :cluster;

-- name: kafka_node_alive
-- A listener says it is alive; answers the cluster's listeners seen within `within_seconds`.
WITH seen AS (
    INSERT INTO queen.kafka_nodes (cluster, node_id, host, port)
    VALUES (:cluster, :node_id, :host, :port)
        ON CONFLICT (cluster, node_id) DO UPDATE
       SET host = excluded.host, port = excluded.port, seen_at = now())
SELECT node_id, host, port FROM queen.kafka_nodes
 WHERE cluster = :cluster AND node_id <> :node_id
   AND seen_at > now() - make_interval(secs => :within_seconds)
UNION ALL
SELECT :node_id, :host, :port;
