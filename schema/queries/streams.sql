-- Statements of streams (wire-protocol-extensions §18; functions/50_streams.sql). Loaded by
-- core/storage/statements.py. A query is its tenant's (migration 140): every statement takes
-- the caller's tenant, and another tenant's query or partition is one that does not exist.

-- name: stream_register
-- Register a query: its id and fresh | same | reset | conflict (queen.stream_register).
-- `sink_queue`: null for none.
SELECT query_id, outcome
  FROM queen.stream_register(:tenant, :name, :source_queue, :sink_queue, :config_hash, :reset);

-- name: stream_state_get
-- A partition's state rows in key byte order, filtered (AND) by keys, a literal key prefix
-- and a ripeness bound on value.windowEnd.
-- `keys`: empty for any; `key_prefix`: '' for any; `ripe_at_or_before`: epoch ms (null: any),
-- rows whose numeric value.windowEnd is at or before it.
-- Rows stop where their keys and values as text pass `max_bytes` (QUEEN_LIST_MAX_BYTES), the
-- first kept whatever its size; `matched` (on every row) counts the rows the filters
-- matched, so the caller knows when some were left out (and refuses the read: a client
-- takes a key it was not given for a key without state). Nothing left out is sent.
WITH matched AS MATERIALIZED (
    SELECT s.key, s.value::text AS value, s.updated_at
      FROM queen.stream_state s
     WHERE s.query_id = :query_id AND s.partition_id = :partition_id
       AND EXISTS (SELECT 1 FROM queen.stream_queries q
                    WHERE q.id = :query_id AND q.tenant = :tenant)
       AND (cardinality(:keys::text[]) = 0 OR s.key = ANY(:keys::text[]))
       AND (:key_prefix::text = ''
            OR (s.key >= :key_prefix::text
                AND left(s.key, length(:key_prefix::text)) = :key_prefix::text))
       AND (:ripe_at_or_before::bigint IS NULL
            OR (jsonb_typeof(s.value -> 'windowEnd') = 'number'
                AND (s.value ->> 'windowEnd')::numeric <= :ripe_at_or_before::bigint))),
sized AS (
    SELECT m.*, row_number() OVER w AS k,
           sum(octet_length(m.key) + octet_length(m.value)) OVER w AS upto,
           count(*) OVER () AS matched
      FROM matched m WINDOW w AS (ORDER BY m.key))
SELECT key, value, updated_at, matched
  FROM sized
 WHERE k = 1 OR upto <= :max_bytes::bigint
 ORDER BY key;

-- name: stream_cycle
-- One cycle in one statement (see functions/50_streams.sql, queen.stream_cycle, for the arguments).
-- The state ops (`deletes`, `keys`, `values` as JSON text); the sink pushes as
-- `append_partitions` takes them (queues .. encrypted, write.sql); the ack (`ack`: whether
-- there is one; `ack_transaction_id`: of the last acked message).
SELECT error, source_queue, ack_count, lease_released, wake_queue, wake_partition,
       state_applied, sink_queue_ids, sink_partition_ids, sink_bases, sink_times
  FROM queen.stream_cycle(:tenant::text, :query_id::uuid, :partition_id::bigint, :group::text,
                          :deletes::boolean[], :keys::text[], :values::text[],
                          :queues::text[], :partitions::text[], :namespaces::text[],
                          :tasks::text[], :default_options::jsonb, :segments::integer[],
                          :frames::integer[], :blobs::bytea[], :transaction_ids::text[],
                          :repeats::boolean[], :encrypted::boolean[], :ack::boolean,
                          :lease_id::text, :ok::boolean, :release::boolean, :count::bigint,
                          :ack_transaction_id::text);

-- name: stream_delete_query
-- Delete a query by name with its state and cycle counters; answers its id (nothing when
-- absent). The query's advisory lock is taken exclusively first (queen.stream_delete_query),
-- so no cycle of it is running or starts before the commit (it then finds no query).
SELECT queen.stream_delete_query(:tenant, :name);

-- name: stream_list
-- Every query with its partitions: state rows, bytes, cycles and the last cycle's time
-- (the dashboard). One row per (query, partition); a query without cycles has one row
-- with a null partition.
SELECT q.id AS query_id, q.name, q.source_queue, q.sink_queue, q.config_hash, q.created_at,
       p.partition_id, lp.name AS partition, coalesce(p.cycles, 0) AS cycles, p.last_cycle_at,
       coalesce(st.keys, 0) AS state_keys, coalesce(st.bytes, 0) AS state_bytes
  FROM queen.stream_queries q
  LEFT JOIN queen.stream_partitions p ON p.query_id = q.id
  LEFT JOIN queen.log_partitions lp ON lp.id = p.partition_id
  LEFT JOIN LATERAL (
        SELECT count(*) AS keys, sum(pg_column_size(s.value))::bigint AS bytes
          FROM queen.stream_state s
         WHERE s.query_id = q.id AND s.partition_id = p.partition_id) st ON true
 WHERE q.tenant = :tenant
 ORDER BY q.name, lp.name;
