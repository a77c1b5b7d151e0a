-- Statements of the read path: pop (claim under a lease), ack, lease extension.
-- Loaded by core/storage/statements.py. A lease is live iff worker_id IS NOT NULL AND
-- lease_expires_at > now(); every lease decision uses the database clock.

-- name: pop_ready
-- Claim among known candidates and read, in one statement (see functions/30_pop.sql for the
-- arguments and the answer). $1 route of the candidates' shard (null: one PostgreSQL, or
-- no candidates), $2 queue or null, $3 namespace or null, $4 task or null, $5 partition or
-- null, $6 group, $7 named group, $8 seed mode, $9 seed instant, $10 store the seed,
-- $11 batch, $12 partitions, $13 autoAck, $14 lease seconds (0 = the queue's), $15 lease
-- fallback, $16 lease id, $17 candidate partition ids, $18 conflation declared,
-- $19 conflating width
SELECT verdict, queue_id, queue, partition_id, partition, span_start, span_end, retry_count,
       base_offset, created_at, blob, last_offset, conflation, width,
       extract(epoch FROM due - clock_timestamp())::float8 AS due_in
  FROM queen.pop_ready($1::bigint, $2, $3, $4, $5, $6, $7, $8, $9::timestamptz, $10, $11,
                       $12, $13, $14, $15, $16, $17::bigint[], $18, $19);

-- name: pop_ready_here
-- As pop_ready, with no shard named (route null: one PostgreSQL, or a call over several
-- shards): run where it is received. Citus sends a call of a delegated function to the
-- node of its first argument's shard, for null too, whatever the rest of the statement;
-- a route given by a subquery is no constant it can hash, so the call stays here (and
-- needs no other node: a call without a route on a cluster with a worker down still
-- runs on the others).
SELECT verdict, queue_id, queue, partition_id, partition, span_start, span_end, retry_count,
       base_offset, created_at, blob, last_offset, conflation, width,
       extract(epoch FROM due - clock_timestamp())::float8 AS due_in
  FROM queen.pop_ready((SELECT $1::bigint), $2, $3, $4, $5, $6, $7, $8, $9::timestamptz,
                       $10, $11, $12, $13, $14, $15, $16, $17::bigint[], $18, $19);

-- name: ack
-- Apply acks in one statement (see functions/40_ack.sql for the arguments and the answer).
-- $1 route of the items' shard (null: one PostgreSQL), $2 groups, $3 partition ids,
-- $4 transactionIds, $5 statuses, $6 lease ids (null = no check), $7 errors, $8 offsets a
-- segment search found (one per item, null = resolve), $9 report the spans to search
-- instead of settling with the index
SELECT idx, outcome, error, lease_released, dlq, queue_id, partition_id, scan_from, scan_to,
       conflated
  FROM queen.ack($1::bigint, $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[],
                 $7::text[], $8::bigint[], $9);

-- name: ack_here
-- As ack, with no shard named (route null: one PostgreSQL, or a call over several
-- shards): run where it is received. Citus sends a call of a delegated function to the
-- node of its first argument's shard, for null too, whatever the rest of the statement;
-- a route given by a subquery is no constant it can hash, so the call stays here (and
-- needs no other node: a call without a route on a cluster with a worker down still
-- runs on the others).
SELECT idx, outcome, error, lease_released, dlq, queue_id, partition_id, scan_from, scan_to,
       conflated
  FROM queen.ack((SELECT $1::bigint), $2::text[], $3::bigint[], $4::text[], $5::text[],
                 $6::text[], $7::text[], $8::bigint[], $9);

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
-- Extend every live lease of each lease id (distinct ids); expired or released leases are
-- not revived (functions/35_leases.sql). One row per cursor extended: its lease id and new
-- expiry; and per lease with parts on other shards, the routes to extend it on next. $1 route of the leases' shard (null: search by lease id), $2 lease ids,
-- $3 seconds (one per lease id)
SELECT lease_id, lease_expires_at, routes
  FROM queen.extend_leases($1::bigint, $2::text[], $3::float8[]);

-- name: extend_leases_here
-- As extend_leases, with no shard named (route null: one PostgreSQL, or a call over several
-- shards): run where it is received. Citus sends a call of a delegated function to the
-- node of its first argument's shard, for null too, whatever the rest of the statement;
-- a route given by a subquery is no constant it can hash, so the call stays here (and
-- needs no other node: a call without a route on a cluster with a worker down still
-- runs on the others).
SELECT lease_id, lease_expires_at, routes
  FROM queen.extend_leases((SELECT $1::bigint), $2::text[], $3::float8[]);

-- name: link_lease
-- A lease spans shards: its first shard's row learns the others (functions/35_leases.sql).
-- $1 the first shard's route, $2 lease id, $3 the other shards' routes
SELECT queen.link_lease($1::bigint, $2, $3::bigint[]);
