-- Statements of the read path: pop (claim under a lease), ack, lease extension.
-- Loaded by core/storage/statements.py. A lease is live iff worker_id IS NOT NULL AND
-- lease_expires_at > now(); every lease decision uses the database clock.

-- name: pop_ready
-- Claim among known candidates and read, in one statement (see functions/30_pop.sql for the
-- arguments and the answer). $1 queue or null, $2 namespace or null, $3 task or null,
-- $4 partition or null, $5 group, $6 named group, $7 seed mode, $8 seed instant, $9 store
-- the seed, $10 batch, $11 partitions, $12 autoAck, $13 lease seconds (0 = the queue's),
-- $14 lease fallback, $15 lease id, $16 candidate partition ids, $17 conflation declared,
-- $18 conflating width, $19 the tenant whose queues it addresses
SELECT verdict, queue_id, queue, partition_id, partition, span_start, span_end, retry_count,
       base_offset, created_at, blob, last_offset, conflation, width,
       extract(epoch FROM due - clock_timestamp())::float8 AS due_in
  FROM queen.pop_ready($19, $1, $2, $3, $4, $5, $6, $7, $8::timestamptz, $9, $10, $11, $12,
                       $13, $14, $15, $16::bigint[], $17, $18);

-- name: ack
-- Apply acks in one statement (see functions/40_ack.sql for the arguments and the answer).
-- A partition of another tenant's queue than the item's is passed as id 0, which no
-- partition has: the item is answered as one naming a partition that does not exist.
-- $1 groups, $2 partition ids, $3 transactionIds, $4 statuses, $5 lease ids (null = no
-- check), $6 errors, $7 offsets a segment search found (one per item, null = resolve),
-- $8 report the spans to search instead of settling with the index, $9 each item's tenant
SELECT idx, outcome, error, lease_released, dlq, queue_id, partition_id, scan_from, scan_to,
       conflated
  FROM queen.ack($1::text[],
                 ARRAY(SELECT CASE WHEN q.tenant = u.tenant THEN u.pid ELSE 0 END
                         FROM unnest($2::bigint[], $9::text[]) WITH ORDINALITY
                              AS u(pid, tenant, n)
                         LEFT JOIN queen.log_partitions p ON p.id = u.pid
                         LEFT JOIN queen.queues q ON q.id = p.queue_id
                        ORDER BY u.n),
                 $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8);

-- name: span_segments
-- Segments overlapping offsets [lo, hi] of a partition, in offset order (the search for an
-- address the index no longer has), with the names of their queue and partition (what a
-- sealed segment is bound to, core/engine/encryption.py).
-- $1 partition id, $2 lo, $3 hi
SELECT q.name AS queue, p.name AS partition, x.base_offset, x.created_at, x.blob
  FROM queen.log_segments x
  JOIN queen.log_partitions p ON p.id = x.partition_id
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE x.partition_id = $1
   AND x.base_offset <= $3
   AND x.base_offset >= coalesce((SELECT max(y.base_offset) FROM queen.log_segments y
                                   WHERE y.partition_id = $1 AND y.base_offset <= $2), $2)
 ORDER BY x.base_offset;

-- name: extend_leases
-- Extend every live lease of each lease id (distinct ids) on its tenant's queues; expired or
-- released leases are not revived. One row per lease extended: its lease id and new expiry.
-- $1 lease ids, $2 seconds (one per lease id), $3 the tenant of each
UPDATE queen.log_consumers c
   SET lease_expires_at = greatest(c.lease_expires_at, now() + make_interval(secs => e.secs))
  FROM unnest($1::text[], $2::float8[], $3::text[]) AS e(lease, secs, tenant)
 WHERE c.worker_id = e.lease AND c.lease_expires_at > now()
   AND EXISTS (SELECT 1 FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                WHERE p.id = c.partition_id AND q.tenant = e.tenant)
RETURNING c.worker_id AS lease_id, c.lease_expires_at;
