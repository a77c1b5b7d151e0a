-- Statements of ephemeral queues (core/storage/ephemeral.py); the functions are in
-- schema/functions/80_ephemeral.sql. Loaded by core/storage/statements.py.

-- name: eph_push
-- Pushes to one queue, in order, each all or nothing: per push its partition and its count of
-- payloads (`counts`); the payloads (JSON texts) one push after the other; `cap_bytes` the
-- deployment's ceiling on held bytes; `channel` the wake-up channel.
SELECT status, pushed
  FROM queen.eph_push(:queue::text, :partitions::text[], :counts::integer[], :payloads::text[],
                      :cap_bytes::bigint, :channel::text)
 ORDER BY idx;

-- name: eph_pop
-- `partition`: NULL for every partition; `max_bytes`: the answer's budget, of which `spent`
-- went to earlier calls of the same long poll.
SELECT epoch, partition, seq, attempts, payload, bytes
  FROM queen.eph_pop(:queue::text, :partition::text, :group::text, :batch::integer,
                     :auto_ack::boolean, :max_bytes::bigint, :spent::bigint);

-- name: eph_ack
-- Per ack its message's epoch (NULL: an unparsable id), partition and seq, and its status
-- (completed | failed | retry); `channel` the wake-up channel.
SELECT outcome FROM queen.eph_ack(:queue::text, :group::text, :epochs::bigint[],
                                  :partitions::text[], :seqs::bigint[], :statuses::text[],
                                  :channel::text)
 ORDER BY idx;

-- name: eph_configure
-- Store a declaration (replacing the previous one) and make the queue live: `sent` the
-- options as sent, the others the values in force.
WITH stored AS (
    INSERT INTO queen.eph_declared AS d (queue, sent, max_bytes, max_length, policy,
                                         ttl_seconds, lease_seconds, retry_limit, window_ms,
                                         window_count)
    VALUES (:queue::text, :sent::jsonb, :max_bytes, :max_length, :policy, :ttl_seconds,
            :lease_seconds, :retry_limit, :window_ms, :window_count)
    ON CONFLICT (queue) DO UPDATE
       SET sent = excluded.sent, max_bytes = excluded.max_bytes,
           max_length = excluded.max_length, policy = excluded.policy,
           ttl_seconds = excluded.ttl_seconds, lease_seconds = excluded.lease_seconds,
           retry_limit = excluded.retry_limit, window_ms = excluded.window_ms,
           window_count = excluded.window_count, updated_at = now()
    RETURNING updated_at),
live AS (
    INSERT INTO queen.eph_queue (queue) VALUES (:queue::text) ON CONFLICT (queue) DO NOTHING)
SELECT updated_at FROM stored;

-- name: eph_reset
-- Answers the messages dropped.
SELECT queen.eph_reset(:queue::text) AS dropped;

-- name: eph_delete
SELECT deleted, declared FROM queen.eph_delete(:queue::text);

-- name: eph_sweep
-- One batch of the sweep: `idle_seconds` an implicit queue stays empty and untouched before it
-- is collected; `channel` the wake-up channel; `after` the last queue of the previous batch
-- ('' first); `limit` queues per batch. Answers the queues whose leases passed (NULL: another
-- sweep was running) and where the next batch starts (NULL: this one reached the end).
SELECT woken, last_queue
  FROM queen.eph_sweep(:idle_seconds::integer, :channel::text, :after::text, :limit::integer);

-- name: eph_sweeper_claim
-- Whether this connection is (now) the deployment's one ephemeral sweeper: a session lock,
-- held until the connection closes, so a sweeper that dies or loses the server frees it.
SELECT pg_try_advisory_lock(7431, 20) AS claimed;

-- name: eph_options
-- The queue's options in force, as the fields of core.ephemeral.model.Options in their order.
SELECT max_bytes, max_length, policy, ttl_seconds, lease_seconds, retry_limit, window_ms,
       window_count
  FROM queen.eph_options(:queue::text);

-- name: eph_queues
-- Every ephemeral queue, live or declared, by name: tier, gauges, counts and the options in
-- force (NULL options: an implicit queue, the defaults).
SELECT n.queue, d.queue IS NOT NULL AS declared,
       coalesce(e.depth, 0) AS depth, coalesce(e.bytes, 0) AS bytes,
       (SELECT count(*) FROM queen.eph_partition p WHERE p.queue = n.queue) AS partitions,
       (SELECT count(*) FROM queen.eph_group g WHERE g.queue = n.queue) AS groups,
       coalesce(e.drops_bounds, 0) AS drops_bounds, coalesce(e.drops_ttl, 0) AS drops_ttl,
       coalesce(e.drops_retry, 0) AS drops_retry,
       d.max_bytes, d.max_length, d.policy, d.ttl_seconds, d.lease_seconds, d.retry_limit,
       d.window_ms, d.window_count
  FROM (SELECT queue FROM queen.eph_queue UNION SELECT queue FROM queen.eph_declared) n
  LEFT JOIN queen.eph_queue e ON e.queue = n.queue
  LEFT JOIN queen.eph_declared d ON d.queue = n.queue
 WHERE :queue::text IS NULL OR n.queue = :queue::text
 ORDER BY n.queue COLLATE "C";

-- name: eph_depth_partitions
-- Each ring's length and bytes, by partition name.
SELECT p.partition, count(m.seq) AS length, coalesce(sum(m.bytes), 0) AS bytes
  FROM queen.eph_partition p
  LEFT JOIN queen.eph_message m ON m.queue = p.queue AND m.partition = p.partition
 WHERE p.queue = :queue::text
 GROUP BY p.partition
 ORDER BY p.partition COLLATE "C";

-- name: eph_depth_groups
-- Per known group and partition, its backlog (undelivered + awaiting redelivery) and the
-- messages it skipped (evicted before it reached them).
SELECT g.grp AS "group", p.partition,
       (SELECT count(*) FROM queen.eph_message m
         WHERE m.queue = p.queue AND m.partition = p.partition
           AND m.seq > coalesce(c.last_seq, 0))
     + (SELECT count(*) FROM queen.eph_lease l
         WHERE l.queue = p.queue AND l.partition = p.partition AND l.grp = g.grp
           AND l.expires_at <= now()) AS pending,
       coalesce(c.skipped, 0) AS skipped
  FROM queen.eph_group g
  JOIN queen.eph_partition p ON p.queue = g.queue
  LEFT JOIN queen.eph_cursor c
         ON c.queue = g.queue AND c.partition = p.partition AND c.grp = g.grp
 WHERE g.queue = :queue::text
 ORDER BY g.grp COLLATE "C", p.partition COLLATE "C";

-- name: eph_totals
-- Deployment-wide gauges for the metrics: queues, messages held, bytes held, drops.
SELECT (SELECT count(*) FROM (SELECT queue FROM queen.eph_queue
                              UNION SELECT queue FROM queen.eph_declared) n) AS queues,
       coalesce(sum(depth), 0)::bigint AS depth, coalesce(sum(bytes), 0)::bigint AS bytes,
       coalesce(sum(drops_bounds), 0)::bigint AS drops_bounds,
       coalesce(sum(drops_ttl), 0)::bigint AS drops_ttl,
       coalesce(sum(drops_retry), 0)::bigint AS drops_retry
  FROM queen.eph_queue;

-- name: eph_vacuum
-- Reclaim the dead versions the ephemeral tables' churn leaves (every message is inserted
-- and deleted, gauges and cursors are updated by every call): autovacuum looks once a
-- minute, so a flood would otherwise grow them by a minute of traffic. SKIP_LOCKED: a
-- table another worker is vacuuming is left to it.
VACUUM (SKIP_LOCKED) queen.eph_message, queen.eph_lease, queen.eph_queue,
    queen.eph_partition, queen.eph_cursor;
