-- Statements of tenants (core/tenancy; migration 140): their quotas, the bytes they store,
-- the live broker processes that share their rate limits, and the caps on their names.
-- Loaded by core/storage/statements.py.

-- name: tenant_quotas
-- Every tenant's quota (NULL columns: unlimited).
SELECT tenant, requests_per_second, request_burst, messages_per_second, message_burst,
       max_payload_bytes, max_batch_size, max_queues, max_partitions_per_queue,
       max_retention_seconds, max_parked_pops, max_stored_bytes
  FROM queen.tenant_quotas
 ORDER BY tenant;

-- name: tenant_quota_set
-- Store a tenant's quota (replacing its previous one).
-- Its parameters are QuotaRow's fields (core/storage/tenants.py); a limit NULL is unlimited.
INSERT INTO queen.tenant_quotas AS t (tenant, requests_per_second, request_burst,
                                      messages_per_second, message_burst, max_payload_bytes,
                                      max_batch_size, max_queues, max_partitions_per_queue,
                                      max_retention_seconds, max_parked_pops,
                                      max_stored_bytes)
VALUES (:tenant, :requests_per_second, :request_burst, :messages_per_second, :message_burst,
        :max_payload_bytes, :max_batch_size, :max_queues, :max_partitions_per_queue,
        :max_retention_seconds, :max_parked_pops, :max_stored_bytes)
    ON CONFLICT (tenant) DO UPDATE
   SET requests_per_second = excluded.requests_per_second,
       request_burst = excluded.request_burst,
       messages_per_second = excluded.messages_per_second,
       message_burst = excluded.message_burst, max_payload_bytes = excluded.max_payload_bytes,
       max_batch_size = excluded.max_batch_size, max_queues = excluded.max_queues,
       max_partitions_per_queue = excluded.max_partitions_per_queue,
       max_retention_seconds = excluded.max_retention_seconds,
       max_parked_pops = excluded.max_parked_pops,
       max_stored_bytes = excluded.max_stored_bytes, updated_at = now();

-- name: tenant_quota_clear
-- Remove a tenant's quota (and its usage row); answers whether it had one.
WITH usage AS (DELETE FROM queen.tenant_usage WHERE tenant = :tenant)
DELETE FROM queen.tenant_quotas WHERE tenant = :tenant RETURNING tenant;

-- name: tenant_list
-- Every tenant with a queue, a KV key, a timer, a stream query or a quota: its queues and
-- partitions, and whether it has a quota.
WITH named AS (
    SELECT tenant FROM queen.queues
    UNION SELECT tenant FROM queen.tenant_quotas
    UNION SELECT DISTINCT tenant FROM queen.kv
    UNION SELECT DISTINCT tenant FROM queen.timers
    UNION SELECT tenant FROM queen.stream_queries)
SELECT n.tenant,
       (SELECT count(*) FROM queen.queues q WHERE q.tenant = n.tenant) AS queues,
       (SELECT count(*) FROM queen.partition_directory d JOIN queen.queues q
                                 ON q.id = d.queue_id
         WHERE q.tenant = n.tenant) AS partitions,
       EXISTS (SELECT 1 FROM queen.tenant_quotas t WHERE t.tenant = n.tenant) AS limited,
       (SELECT u.stored_bytes FROM queen.tenant_usage u WHERE u.tenant = n.tenant)
           AS stored_bytes
  FROM named n
 ORDER BY n.tenant;

-- name: tenant_live_processes
-- How many broker processes serve requests now (a heartbeat younger than `seconds` seconds, of a
-- web worker or a Kafka listener; not the reaper or the timer firer: the role each process
-- flushes, core/upkeep/stats.py): each enforces its share of a tenant's rates.
SELECT count(*) FROM queen.stats_processes
 WHERE seen_at > now() - make_interval(secs => :seconds::float8)
   AND coalesce(figures ->> 'role', 'web') IN ('web', 'kafka');

-- name: tenant_usage
-- The stored bytes last measured of every limited tenant.
SELECT tenant, stored_bytes FROM queen.tenant_usage ORDER BY tenant;

-- name: tenant_usage_claim
-- Take the measurement of a tenant's stored bytes when the last one is older than `seconds`
-- seconds (or there is none): true for the one process that takes it. The row's lock is
-- held by the caller's transaction until it stores the figure.
INSERT INTO queen.tenant_usage AS u (tenant, measured_at) VALUES (:tenant, now())
    ON CONFLICT (tenant) DO UPDATE SET measured_at = now()
 WHERE u.measured_at < now() - make_interval(secs => :seconds::float8)
RETURNING true;

-- name: tenant_usage_measure
-- What a tenant stores, in bytes: its queues' segments as stored (compressed; octet_length
-- of the out-of-line blob reads its size from the TOAST pointer, not the data), their
-- dead-letter copies and payloads, its KV values and its pending timers' payloads.
WITH parts AS (
    SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE q.tenant = :tenant)
SELECT (coalesce((SELECT sum(octet_length(s.blob)) FROM queen.log_segments s
                   WHERE s.partition_id IN (SELECT id FROM parts)), 0)
      + coalesce((SELECT sum(octet_length(s.blob)) FROM queen.log_dlq_segments s
                   WHERE s.partition_id IN (SELECT id FROM parts)), 0)
      + coalesce((SELECT sum(octet_length(d.payload)) FROM queen.log_dlq d
                   WHERE d.partition_id IN (SELECT id FROM parts)), 0)
      + coalesce((SELECT sum(octet_length(k.value)) FROM queen.kv k WHERE k.tenant = :tenant), 0)
      + coalesce((SELECT sum(octet_length(t.payload)) FROM queen.timers t
                   WHERE t.tenant = :tenant), 0))::bigint;

-- name: tenant_usage_store
-- Store a measurement.
UPDATE queen.tenant_usage SET stored_bytes = :stored_bytes, measured_at = now()
 WHERE tenant = :tenant;

-- name: tenant_names_lock
-- Serialise the creation of a limited tenant's queues and partitions (until the caller's
-- transaction ends): its counts below are then exact across processes.
SELECT pg_advisory_xact_lock(hashtextextended('queen.tenant-names:' || :tenant, 0));

-- name: tenant_names
-- What creating these (queue, partition) pairs would add: per pair, whether the queue and
-- the partition exist and how many partitions the queue has; and the tenant's queue count
-- on every row. Partitions are counted in the directory (queen.partition_directory: a copy
-- on every Citus node).
-- `queues`, `partitions`: the pairs.
SELECT u.queue, u.partition, q.id IS NOT NULL AS queue_exists,
       EXISTS (SELECT 1 FROM queen.partition_directory d
                WHERE d.queue_id = q.id AND d.name = u.partition) AS partition_exists,
       (SELECT count(*) FROM queen.partition_directory d WHERE d.queue_id = q.id)
           AS partitions,
       (SELECT count(*) FROM queen.queues x WHERE x.tenant = :tenant) AS queues
  FROM unnest(:queues::text[], :partitions::text[]) AS u(queue, partition)
  LEFT JOIN queen.queues q ON q.tenant = :tenant AND q.name = u.queue;

-- name: tenant_names_create
-- Create a tenant's queues (default options) under its names lock, so the next count sees
-- them; what exists already is left as it is. Their partitions follow
-- (tenant_names_create_partitions).
-- `default_options`: jsonb text.
INSERT INTO queen.queues (tenant, name, namespace, task, options)
SELECT :tenant, u.name, u.namespace, u.task, :default_options::jsonb
  FROM unnest(:queues::text[], :namespaces::text[], :tasks::text[]) AS u(name, namespace, task)
    ON CONFLICT ON CONSTRAINT queues_tenant_name_key DO NOTHING;

-- name: tenant_names_create_partitions
-- Create partitions of a tenant's queues under its names lock, as a push creates them
-- (queen.partition_ids: the directory entry and the head, functions/20_append.sql); what
-- exists already is left as it is. Answers how many pairs were given.
-- Per partition (in (queue, partition) order) its tenant, queue, name, and the namespace and
-- task of a queue created here if it went meanwhile; `default_options`: jsonb text.
SELECT count(*) FROM queen.partition_ids(:tenants::text[], :queues::text[], :partitions::text[],
                                         :namespaces::text[],
                                         :tasks::text[], :default_options::jsonb);

-- name: tenant_queue_names
-- Every queue name of a tenant (one at its queue cap: at most that many).
SELECT name FROM queen.queues WHERE tenant = :tenant;
