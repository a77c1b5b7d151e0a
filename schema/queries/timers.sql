-- Statements of timers (core/timers; schema/migrations/075_timers.sql,
-- schema/functions/70_timers.sql). A timer is its tenant's (migration 140): the statements of
-- the routes take the caller's tenant, the firer's carry each timer's.

-- name: timers_apply
-- Apply one call's ops in order at one instant (see queen.timers_apply), in the `tenant`'s
-- timers and queues: `now` null is the transaction's now(); the op arrays hold one element
-- per op.
SELECT status, txn, deliver_at
  FROM queen.timers_apply(:tenant::text, coalesce(:now::timestamptz, now()),
                          :cancels::boolean[], :queues::text[], :keys::text[],
                          :partitions::text[], :delays_ms::bigint[], :txns::text[],
                          :message_ids::uuid[], :payloads::bytea[], :zstd::boolean[],
                          :encrypted::boolean[], :sealed::boolean[], :producer_sub::text);

-- name: timers_encrypted_queues
-- Which of these queues (of `tenant`) exist with encryptionEnabled.
SELECT name FROM queen.queues
 WHERE tenant = :tenant AND name = ANY(:queues::text[])
   AND coalesce((options ->> 'encryptionEnabled')::boolean, false);

-- name: timers_peek
-- One timer with its payload, and whether a fire holds its row now (queen.timer_claimed).
SELECT t.queue, t.timer_key, t.partition, t.deliver_at, t.txn, t.message_id, t.payload,
       t.payload_zstd, t.encrypted, t.producer_sub, t.attempts, t.last_error,
       queen.timer_claimed(t.tenant, t.queue, t.timer_key) AS claimed, t.created_at,
       t.updated_at
  FROM queen.timers t
 WHERE t.tenant = :tenant AND t.queue = :queue AND t.timer_key = :key;

-- name: timers_page
-- One queue's timers after a key (exclusive), in byte order, without payloads; one row more
-- than the page tells whether it is truncated. `after`: '' from the start; `rows`: rows to read.
SELECT t.queue, t.timer_key, t.partition, t.deliver_at, t.txn, t.message_id,
       NULL::bytea AS payload, t.payload_zstd, t.encrypted, t.producer_sub, t.attempts,
       t.last_error, queen.timer_claimed(t.tenant, t.queue, t.timer_key) AS claimed,
       t.created_at, t.updated_at
  FROM queen.timers t
 WHERE t.tenant = :tenant AND t.queue = :queue AND t.timer_key > :after
 ORDER BY t.timer_key
 LIMIT :rows;

-- name: timers_count
-- One queue's timers whose key starts with a literal prefix.
SELECT count(*) FROM queen.timers
 WHERE tenant = :tenant AND queue = :queue
   AND timer_key >= :prefix AND starts_with(timer_key, :prefix);

-- name: timers_queues
-- Queues with pending timers, after a name (exclusive), for the dashboard: how many, the
-- next due, how many failed at least once. `rows`: rows to read.
SELECT queue, count(*) AS pending, min(deliver_at) AS next_due,
       count(*) FILTER (WHERE attempts > 0) AS failing
  FROM queen.timers
 WHERE tenant = :tenant AND queue > :after
 GROUP BY queue
 ORDER BY queue
 LIMIT :rows;

-- name: timers_claim
-- Take due rows for a fire, earliest first; rows another fire holds are skipped, so two
-- firers never take one timer. Concurrent fires of one firer each take the destination
-- partitions of one residue of a hash (queue, partition) modulo their number, so they do
-- not queue behind one another's partition locks. `limit`: at most this many; `shards`:
-- modulus, `shard`: residue.
SELECT queue, timer_key, partition, txn, message_id, payload, payload_zstd, sealed,
       producer_sub, attempts, created_at,
       extract(epoch FROM clock_timestamp() - deliver_at)::float8 AS lag_seconds, tenant
  FROM queen.timers
 WHERE fire_at <= clock_timestamp()
   AND (hashtext(queue || '/' || partition) & 2147483647) % :shards = :shard
 ORDER BY fire_at
 LIMIT :limit
   FOR UPDATE SKIP LOCKED;

-- name: timers_delete
-- Remove fired timers (rows this transaction holds).
DELETE FROM queen.timers t
 USING unnest(:queues::text[], :keys::text[], :tenants::text[]) AS d(queue, timer_key, tenant)
 WHERE t.tenant = d.tenant AND t.queue = d.queue AND t.timer_key = d.timer_key;

-- name: timers_failed
-- Record failed fires: one more attempt, the error, and the backoff before the next.
UPDATE queen.timers t
   SET attempts = t.attempts + 1, last_error = d.error,
       fire_at = clock_timestamp() + d.backoff * interval '1 second',
       updated_at = clock_timestamp()
  FROM unnest(:queues::text[], :keys::text[], :errors::text[], :backoff_seconds::float8[],
              :tenants::text[])
       AS d(queue, timer_key, error, backoff, tenant)
 WHERE t.tenant = d.tenant AND t.queue = d.queue AND t.timer_key = d.timer_key;

-- name: timers_dead_letter
-- Write a timer's dead letter (see queen.timer_dead_letter); answers the partition id.
-- The queue is the `tenant`'s.
SELECT queen.timer_dead_letter(:tenant, :queue, :partition, :namespace, :task,
                               :default_options::jsonb, :txn, :message_id, :producer_sub,
                               :payload, :error, :attempts, :created_at);

-- name: timers_next_due
-- Seconds until the earliest timer may be taken (negative: overdue), null when none.
SELECT extract(epoch FROM min(fire_at) - clock_timestamp())::float8 FROM queen.timers;

-- name: timers_pending
-- Pending timers in all (null), or of one tenant, for the metrics.
-- `tenant`: null for every tenant.
SELECT count(*) FROM queen.timers WHERE :tenant::text IS NULL OR tenant = :tenant;
