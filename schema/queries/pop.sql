-- Statements of the read path: pop (claim under a lease), ack, lease extension.
-- Loaded by core/storage/statements.py. A lease is live iff worker_id IS NOT NULL AND
-- lease_expires_at > now(); every lease decision uses the database clock. Each call with a
-- `route` has a twin `<name>_here` for a call with no shard named, which the loader derives
-- from its `-- here:` line: the route given by a subquery instead (`Routed` in
-- core/storage/statements.py).

-- name: pop_ready
-- Claim among known candidates and read, in one statement (functions/30_pop.sql says what
-- each argument means and what the answer holds). `route`: a number of the shard every
-- candidate lives on (Citus runs the call on its node: core/storage/shards.py); `tenant`:
-- whose queues it addresses; `max_bytes`: the answer's byte budget.
-- here: (SELECT :route::bigint)
SELECT verdict, queue_id, queue, partition_id, partition, span_start, span_end, retry_count,
       base_offset, created_at, blob, last_offset, conflation, width,
       extract(epoch FROM due - clock_timestamp())::float8 AS due_in
  FROM queen.pop_ready(:route::bigint,
                       :tenant, :queue, :namespace, :task, :partition, :group, :named,
                       :seed_mode, :seed_instant::timestamptz, :store_seed, :batch,
                       :partitions, :auto_ack, :lease_seconds, :lease_fallback, :lease_id,
                       :candidates::bigint[], :conflation, :conflation_width,
                       :max_bytes::bigint);

-- name: ack
-- Apply acks in one statement, one array element per item (functions/40_ack.sql says what
-- each argument means and what the answer holds): a null lease id checks no lease, a null
-- offset is resolved by the index; `scan_missing` reports the spans to search instead of
-- settling with the index. `route`: a number of the shard of every item's partition;
-- `tenants`: each item's caller's (an item naming another tenant's partition is answered as
-- one naming a partition without the group's cursor).
-- here: (SELECT :route::bigint)
SELECT idx, outcome, error, lease_released, dlq, queue_id, partition_id, scan_from, scan_to,
       conflated
  FROM queen.ack(:route::bigint,
                 :groups::text[], :partition_ids::bigint[], :transaction_ids::text[],
                 :statuses::text[], :lease_ids::text[], :errors::text[], :offsets::bigint[],
                 :scan_missing, :tenants::text[]);

-- name: ack_joined
-- `ack` with its text columns each sent as one text: asyncpg encodes an array element by
-- element, and a pop's 500 acks in five arrays cost it more than the rest of the call.
-- groups, transaction_ids, statuses, lease_ids, tenants: each item preceded by U+001F (the
-- unit separator, which no name, transactionId, status, lease id or tenant may contain; a
-- lease id U+001E is null), null for a column of nulls; partition_ids: decimal,
-- comma-separated; route, errors, offsets and scan_missing as in `ack`
-- here: (SELECT :route::bigint)
SELECT idx, outcome, error, lease_released, dlq, queue_id, partition_id, scan_from, scan_to,
       conflated
  FROM queen.ack(:route::bigint,
                 (string_to_array(:groups::text, E'\x1f'))[2:],
                 string_to_array(:partition_ids::text, ',')::bigint[],
                 (string_to_array(:transaction_ids::text, E'\x1f'))[2:],
                 (string_to_array(:statuses::text, E'\x1f'))[2:],
                 (string_to_array(:lease_ids::text, E'\x1f', E'\x1e'))[2:],
                 :errors::text[], :offsets::bigint[], :scan_missing,
                 (string_to_array(:tenants::text, E'\x1f'))[2:]);

-- name: ack_spans
-- Commit whole deliveries, one per span (functions/40_ack.sql, queen.ack_spans): the group,
-- partition, lease and offsets [start, end] a pop delivered, and the caller's tenant; all of
-- them or none (`applied` false: nothing written, the caller sends the items to `ack`).
SELECT idx, applied, queue_id, wake
  FROM queen.ack_spans(:groups::text[], :partition_ids::bigint[], :lease_ids::text[],
                       :starts::bigint[], :ends::bigint[], :tenants::text[]);

-- name: span_segments
-- Segments overlapping offsets [lo, hi] of a partition, in offset order (the search for an
-- address the index no longer has), with the names of their queue and partition (what a
-- sealed segment is bound to, core/engine/encryption.py).
SELECT q.name AS queue, p.name AS partition, x.base_offset, x.created_at, x.blob
  FROM queen.log_segments x
  JOIN queen.log_partitions p ON p.id = x.partition_id
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE x.partition_id = :partition_id
   AND x.base_offset <= :hi
   AND x.base_offset >= coalesce((SELECT max(y.base_offset) FROM queen.log_segments y
                                   WHERE y.partition_id = :partition_id
                                     AND y.base_offset <= :lo), :lo)
 ORDER BY x.base_offset;

-- name: extend_leases
-- Extend every live lease of each lease id (distinct ids); expired or released leases are
-- not revived (functions/35_leases.sql). One row per cursor extended: its lease id and new
-- expiry; and per lease with parts on other shards, the routes to extend it on next.
-- `route`: the shard the leases were claimed on (null: search by lease id); `seconds` and
-- `tenants` (the caller's, whose queues' leases alone are extended): one per lease id.
-- here: (SELECT :route::bigint)
SELECT lease_id, lease_expires_at, routes
  FROM queen.extend_leases(:route::bigint, :lease_ids::text[], :seconds::float8[],
                           :tenants::text[]);

-- name: link_lease
-- A lease spans shards: its first shard's row learns the others (functions/35_leases.sql).
-- `route`: the first shard's, `routes`: the other shards'
SELECT queen.link_lease(:route::bigint, :lease_id, :routes::bigint[]);
