-- Statements of the traces (core/admin/traces.py, wire-protocol §6.4) and their retention.
-- Loaded by core/storage/statements.py. A trace is its message's tenant's (migration 140):
-- lookups take the caller's tenant, and a partition of another tenant's queue is not found.

-- name: trace_insert
-- Record a trace of a message of an existing partition, with its names; answers the
-- trace's created_at (nothing when the partition does not exist). The message's offset
-- comes from the transactionId index (the newest occurrence; null when not indexed); the
-- worker is the live lease holder of (partition, group), if any. `data`: JSON bytes;
-- `names`: distinct.
WITH t AS (
    INSERT INTO queen.traces (id, partition_id, transaction_id, txn_key, msg_offset,
                              consumer_group, event_type, data, trace_names, worker_id,
                              tenant)
    SELECT :trace_id, p.id, :transaction_id, queen.txn_key(:transaction_id),
           (SELECT max(i.msg_offset) FROM queen.log_txn_index i
             WHERE i.partition_id = p.id AND i.txn_key = queen.txn_key(:transaction_id)),
           :group, :event_type, :data, :names::text[],
           (SELECT c.worker_id FROM queen.log_consumers c
             WHERE c.partition_id = p.id AND c.consumer_group = :group
               AND c.lease_expires_at > now()),
           q.tenant
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = :partition_id AND q.tenant = :tenant
    RETURNING id, created_at, tenant),
n AS (
    INSERT INTO queen.trace_names (trace_id, name, created_at, tenant)
    SELECT t.id, u.name, t.created_at, t.tenant
      FROM t CROSS JOIN unnest(:names::text[]) AS u(name))
SELECT created_at FROM t;

-- name: traces_of_message
-- One page of the traces of one message, oldest first, that stops where the bytes of their
-- data pass `max_bytes` (QUEEN_LIST_MAX_BYTES), its first trace kept whatever its size, as
-- traces_by_name's: the sizes come from the TOAST pointers, and only the traces kept are
-- joined back for their data.
WITH page AS (
    SELECT t.id, t.created_at, octet_length(t.data) AS size FROM queen.traces t
     WHERE t.partition_id = :partition_id AND t.txn_key = queen.txn_key(:transaction_id)
       AND t.transaction_id = :transaction_id
       AND t.tenant = :tenant
     ORDER BY t.created_at, t.id
     LIMIT :limit OFFSET :offset),
kept AS (
    SELECT s.id, s.created_at FROM (
        SELECT page.id, page.created_at, row_number() OVER w AS k, sum(page.size) OVER w AS upto
          FROM page WINDOW w AS (ORDER BY page.created_at, page.id)) s
     WHERE s.k = 1 OR s.upto <= :max_bytes::bigint)
SELECT t.id, t.event_type, t.data, t.consumer_group, t.worker_id, t.created_at,
       t.trace_names
  FROM kept JOIN queen.traces t ON t.id = kept.id
 ORDER BY kept.created_at, kept.id;

-- name: traces_count_of_message
-- The number of traces of one message (all pages).
SELECT count(*) FROM queen.traces t
 WHERE t.partition_id = :partition_id AND t.txn_key = queen.txn_key(:transaction_id)
   AND t.transaction_id = :transaction_id
   AND t.tenant = :tenant;

-- name: traces_by_name
-- One page of the traces carrying a name, newest first, with their message's address,
-- queue and partition names (null when the partition is gone) and offset.
-- The page stops where the bytes of its traces' data pass `max_bytes`
-- (QUEEN_LIST_MAX_BYTES; a trace's data may be 16 MiB), its first trace kept whatever its
-- size; core/admin/traces.py cuts it further by the messages' payloads. octet_length reads
-- a stored value's size from its TOAST pointer: the traces left out are never read.
WITH page AS (
    SELECT n.trace_id, n.created_at FROM queen.trace_names n
     WHERE n.tenant = :tenant AND n.name = :name
     ORDER BY n.created_at DESC, n.trace_id DESC
     LIMIT :limit OFFSET :offset),
kept AS (
    SELECT s.trace_id, s.created_at FROM (
        SELECT page.trace_id, page.created_at, row_number() OVER w AS k,
               sum(octet_length(t.data)) OVER w AS upto
          FROM page JOIN queen.traces t ON t.id = page.trace_id
        WINDOW w AS (ORDER BY page.created_at DESC, page.trace_id DESC)) s
     WHERE s.k = 1 OR s.upto <= :max_bytes::bigint)
SELECT t.id, t.event_type, t.data, t.consumer_group, t.worker_id, t.created_at,
       t.trace_names, t.transaction_id, t.partition_id, q.name AS queue,
       p.name AS partition, t.msg_offset
  FROM kept
  JOIN queen.traces t ON t.id = kept.trace_id
  LEFT JOIN queen.log_partitions p ON p.id = t.partition_id
  LEFT JOIN queen.queues q ON q.id = p.queue_id
 ORDER BY kept.created_at DESC, kept.trace_id DESC;

-- name: traces_count_by_name
-- The number of traces carrying a name.
SELECT count(*) FROM queen.trace_names WHERE tenant = :tenant AND name = :name;

-- name: trace_names_page
-- One page of the trace names, most recently used first, with how many traces and how
-- many distinct messages carry each, and the total number of names; `search`: a substring
-- the name must contain, or null.
WITH names AS (
    SELECT n.name, count(*) AS trace_count,
           count(DISTINCT (t.partition_id, t.txn_key)) AS message_count,
           max(n.created_at) AS last_seen
      FROM queen.trace_names n JOIN queen.traces t ON t.id = n.trace_id
     WHERE n.tenant = :tenant AND (:search::text IS NULL OR strpos(n.name, :search) > 0)
     GROUP BY n.name)
SELECT name, trace_count, message_count, last_seen, count(*) OVER () AS total
  FROM names
 ORDER BY last_seen DESC, name
 LIMIT :limit OFFSET :offset;

-- name: traces_delete_partitions
-- Remove the traces of deleted partitions (with the queue that owned them), and their names.
WITH gone AS (
    DELETE FROM queen.traces WHERE partition_id = ANY(:partition_ids::bigint[]) RETURNING id)
DELETE FROM queen.trace_names n USING gone WHERE n.trace_id = gone.id;

-- name: reaper_expire_traces
-- Delete up to `batch` traces older than `retention_seconds`, oldest first, with their
-- names; answers the number of traces deleted.
WITH doomed AS (
    SELECT t.id FROM queen.traces t
     WHERE t.created_at < now() - make_interval(secs => :retention_seconds::bigint)
     ORDER BY t.created_at
     LIMIT :batch),
gone AS (
    DELETE FROM queen.traces t USING doomed d WHERE t.id = d.id RETURNING t.id),
names AS (
    DELETE FROM queen.trace_names n USING gone WHERE n.trace_id = gone.id)
SELECT count(*) FROM gone;
