-- Statements of the Kafka edge's core service (core/kafka). Topics are queues and groups are
-- consumer groups of one tenant (migration 140): the statements that name them take the
-- connection's tenant.

-- name: kafka_topics
-- Queues (all, or those named) with the partition count declared for Kafka (null: none)
-- and one past the highest partition named by a canonical decimal (null: none).
-- $1 queue names or null (all), $2 tenant
SELECT q.name, t.partitions AS declared,
       (SELECT max(d.name::bigint) + 1 FROM queen.partition_directory d
         WHERE d.queue_id = q.id AND d.name ~ '^(0|[1-9][0-9]{0,8})$') AS seen
  FROM queen.queues q
  LEFT JOIN queen.kafka_topics t ON t.queue_id = q.id
 WHERE q.tenant = $2 AND ($1::text[] IS NULL OR q.name = ANY($1::text[]))
 ORDER BY q.name;

-- name: kafka_declare
-- Record a queue's Kafka partition count unless one is recorded; answers the queue id when
-- this call recorded it (no row: the queue is unknown or already had a count).
-- $1 queue name, $2 partition count, $3 tenant
INSERT INTO queen.kafka_topics (queue_id, partitions)
SELECT q.id, $2 FROM queen.queues q WHERE q.tenant = $3 AND q.name = $1
    ON CONFLICT (queue_id) DO NOTHING
RETURNING queue_id;

-- name: kafka_offset_for_time
-- The first offset of a partition appended at or after $3 (segments carry one created_at for
-- all their messages, so the first such segment's base offset is exact), never below the
-- log start, with that segment's append time; no row when nothing is that recent.
-- $1 queue name, $2 partition name, $3 timestamp, $4 tenant
SELECT greatest(s.base_offset, p.log_start) AS offset, s.created_at
  FROM queen.queues q
  JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = $2
  JOIN queen.log_segments s ON s.partition_id = p.id
 WHERE q.tenant = $4 AND q.name = $1 AND s.created_at >= $3 AND s.last_offset >= p.log_start
 ORDER BY s.base_offset
 LIMIT 1;

-- name: kafka_commit
-- Set a group's cursors on partitions of a queue to `committed` (creating partitions and
-- cursors that do not exist), like a seek: any lease is released and the retry state reset.
-- Answers the partitions set, by name (none when the queue is unknown).
-- $1 consumer group, $2 queue name, $3 partition names, $4 committed offsets (same order),
-- $5 tenant
WITH q AS (SELECT id, tenant, name, namespace, task, options FROM queen.queues
            WHERE tenant = $5 AND name = $2),
wanted AS (
    SELECT u.name, u.committed FROM unnest($3::text[], $4::bigint[]) AS u(name, committed)
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
    SELECT t.id, $1, t.committed, now() FROM target t
        ON CONFLICT (partition_id, consumer_group) DO UPDATE
       SET committed = excluded.committed, batch_end = NULL, worker_id = NULL,
           lease_expires_at = NULL, retry_count = 0, not_before = NULL,
           last_consumed_at = excluded.last_consumed_at,  -- (Citus: no now() here)
           total_consumed = c.total_consumed + greatest(excluded.committed - c.committed, 0)
    RETURNING c.partition_id)
SELECT t.name FROM set JOIN target t ON t.id = set.partition_id;

-- name: kafka_committed
-- A group's cursors on a queue: partition name and committed offset.
-- $1 consumer group, $2 queue name, $3 tenant
SELECT p.name, c.committed
  FROM queen.queues q
  JOIN queen.log_partitions p ON p.queue_id = q.id
  JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = $1
 WHERE q.tenant = $3 AND q.name = $2;

-- name: kafka_group_names
-- Every consumer group with a cursor on a queue of the tenant.
-- $1 tenant
SELECT DISTINCT c.consumer_group
  FROM queen.log_consumers c
  JOIN queen.log_partitions p ON p.id = c.partition_id
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE q.tenant = $1
 ORDER BY c.consumer_group;

-- name: kafka_new_producer_id
-- A producer id never handed out before.
SELECT nextval('queen.kafka_producer_ids');

-- name: kafka_group_positions
-- A group's cursors on every queue: queue name, partition name, committed offset.
-- $1 consumer group, $2 tenant
SELECT q.name AS queue, p.name, c.committed
  FROM queen.log_consumers c
  JOIN queen.log_partitions p ON p.id = c.partition_id
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE c.consumer_group = $1 AND q.tenant = $2;

-- name: kafka_claim_coordinator
-- Whether this connection holds (now) the session lock of a Kafka cluster's coordinator:
-- held until the connection closes, so a listener that dies or loses the server frees it.
-- $1 cluster name
SELECT pg_try_advisory_lock(hashtextextended('queen-kafka-coordinator:' || $1, 0));

-- name: kafka_record_coordinator
-- The lock holder records itself as its cluster's coordinator.
-- $1 cluster, $2 node id, $3 host, $4 port
INSERT INTO queen.kafka_coordinators (cluster, node_id, host, port)
VALUES ($1, $2, $3, $4)
    ON CONFLICT (cluster) DO UPDATE
   SET node_id = excluded.node_id, host = excluded.host, port = excluded.port,
       elected_at = now();

-- name: kafka_coordinator
-- A cluster's coordinator as last recorded (no row: none elected yet).
-- $1 cluster
SELECT node_id, host, port FROM queen.kafka_coordinators WHERE cluster = $1;

-- name: kafka_node_alive
-- A listener says it is alive; answers the cluster's listeners seen within $5 seconds.
-- $1 cluster, $2 node id, $3 host, $4 port, $5 seconds
WITH seen AS (
    INSERT INTO queen.kafka_nodes (cluster, node_id, host, port)
    VALUES ($1, $2, $3, $4)
        ON CONFLICT (cluster, node_id) DO UPDATE
       SET host = excluded.host, port = excluded.port, seen_at = now())
SELECT node_id, host, port FROM queen.kafka_nodes
 WHERE cluster = $1 AND node_id <> $2 AND seen_at > now() - make_interval(secs => $5)
UNION ALL
SELECT $2, $3, $4;
