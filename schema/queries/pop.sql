-- Statements of the read path: pop (claim under a lease), ack, lease extension.
-- Loaded by core/storage/statements.py. A lease is live iff worker_id IS NOT NULL AND
-- lease_expires_at > now(); every lease decision uses the database clock.

-- name: pop_ready
-- Claim among known candidates and read, in one statement (functions/30_pop.sql says what
-- each argument means and what the answer holds); `tenant`: whose queues it addresses.
SELECT verdict, queue_id, queue, partition_id, partition, span_start, span_end, retry_count,
       base_offset, created_at, blob, last_offset, conflation, width,
       extract(epoch FROM due - clock_timestamp())::float8 AS due_in
  FROM queen.pop_ready(:tenant, :queue, :namespace, :task, :partition, :group, :named,
                       :seed_mode, :seed_instant::timestamptz, :store_seed, :batch,
                       :partitions, :auto_ack, :lease_seconds, :lease_fallback, :lease_id,
                       :candidates::bigint[], :conflation, :conflation_width);

-- name: ack
-- Apply acks in one statement, one array element per item (functions/40_ack.sql says what
-- each argument means and what the answer holds): a null lease id checks no lease, a null
-- offset is resolved by the index; `scan_missing` reports the spans to search instead of
-- settling with the index. `tenants`: each item's caller's; a partition of another tenant's
-- queue than the item's is passed as id 0, which no partition has, so the item is answered
-- as one naming a partition that does not exist.
SELECT idx, outcome, error, lease_released, dlq, queue_id, partition_id, scan_from, scan_to,
       conflated
  FROM queen.ack(:groups::text[],
                 ARRAY(SELECT CASE WHEN q.tenant = u.tenant THEN u.pid ELSE 0 END
                         FROM unnest(:partition_ids::bigint[], :tenants::text[])
                              WITH ORDINALITY AS u(pid, tenant, n)
                         LEFT JOIN queen.log_partitions p ON p.id = u.pid
                         LEFT JOIN queen.queues q ON q.id = p.queue_id
                        ORDER BY u.n),
                 :transaction_ids::text[], :statuses::text[], :lease_ids::text[],
                 :errors::text[], :offsets::bigint[], :scan_missing);

-- name: ack_joined
-- `ack` with its text columns each sent as one text: asyncpg encodes an array element by
-- element, and a pop's 500 acks in five arrays cost it more than the rest of the call.
-- groups, transaction_ids, statuses, lease_ids, tenants: each item preceded by U+001F (the
-- unit separator, which no name, transactionId, status, lease id or tenant may contain; a
-- lease id U+001E is null), null for a column of nulls; partition_ids: decimal,
-- comma-separated; errors, offsets and scan_missing as in `ack`
SELECT idx, outcome, error, lease_released, dlq, queue_id, partition_id, scan_from, scan_to,
       conflated
  FROM queen.ack((string_to_array(:groups::text, E'\x1f'))[2:],
                 ARRAY(SELECT CASE WHEN q.tenant = u.tenant THEN u.pid ELSE 0 END
                         FROM unnest(string_to_array(:partition_ids::text, ',')::bigint[],
                                     (string_to_array(:tenants::text, E'\x1f'))[2:])
                              WITH ORDINALITY AS u(pid, tenant, n)
                         LEFT JOIN queen.log_partitions p ON p.id = u.pid
                         LEFT JOIN queen.queues q ON q.id = p.queue_id
                        ORDER BY u.n),
                 (string_to_array(:transaction_ids::text, E'\x1f'))[2:],
                 (string_to_array(:statuses::text, E'\x1f'))[2:],
                 (string_to_array(:lease_ids::text, E'\x1f', E'\x1e'))[2:],
                 :errors::text[], :offsets::bigint[], :scan_missing);

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
-- Extend every live lease of each lease id (distinct ids) on its tenant's queues; expired or
-- released leases are not revived. One row per lease extended: its lease id and new expiry
-- (`seconds` and `tenants`: one per lease id).
UPDATE queen.log_consumers c
   SET lease_expires_at = greatest(c.lease_expires_at, now() + make_interval(secs => e.secs))
  FROM unnest(:lease_ids::text[], :seconds::float8[], :tenants::text[]) AS e(lease, secs, tenant)
 WHERE c.worker_id = e.lease AND c.lease_expires_at > now()
   AND EXISTS (SELECT 1 FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                WHERE p.id = c.partition_id AND q.tenant = e.tenant)
RETURNING c.worker_id AS lease_id, c.lease_expires_at;
