-- Version 140: tenants (docs/security/tenants.md). A tenant is a namespace of names: two
-- tenants may each have a queue `orders`, a KV namespace `config`, a timer, a stream query
-- of the same name, and never see each other's.
--
-- Every table that names a thing gets a `tenant` column, '' for the default tenant (the
-- only one a deployment without tenants ever uses, so existing rows need no backfill), and
-- its uniqueness moves from (name) to (tenant, name). Tables keyed by a partition or a queue
-- id (segments, cursors, dead letters, subscriptions, Kafka topics) need nothing: the id
-- belongs to one queue, hence to one tenant. Ephemeral queues keep their key column and
-- scope it instead (core/ephemeral/scoped.py: the tenant and a U+001F separator, which no
-- name may contain, before a non-default tenant's queue name), so their functions are
-- unchanged.
--
-- Functions whose signatures change with this version, dropped here and defined again in
-- ../functions/ with a tenant argument first: queen.append (20_append.sql), queen.pop_ready
-- (30_pop.sql), queen.stream_register, queen.stream_delete_query and queen.stream_cycle
-- (50_streams.sql), queen.timers_apply and queen.timer_dead_letter (70_timers.sql).

DROP FUNCTION IF EXISTS queen.append(text[], text[], text[], text[], jsonb, integer[],
                                     integer[], bytea[], text[], boolean[], boolean[]);
DROP FUNCTION IF EXISTS queen.pop_ready(text, text, text, text, text, boolean, text,
                                        timestamptz, boolean, integer, integer, boolean,
                                        integer, integer, text, bigint[], boolean, integer);
DROP FUNCTION IF EXISTS queen.stream_register(text, text, text, text, boolean);
DROP FUNCTION IF EXISTS queen.stream_delete_query(text);
DROP FUNCTION IF EXISTS queen.stream_cycle(uuid, bigint, text, boolean[], text[], text[],
                                           text[], text[], text[], text[], jsonb, integer[],
                                           integer[], bytea[], text[], boolean[], boolean[],
                                           boolean, text, boolean, boolean, bigint, text);
DROP FUNCTION IF EXISTS queen.timers_apply(timestamptz, boolean[], text[], text[], text[],
                                           bigint[], text[], uuid[], bytea[], boolean[],
                                           boolean[], boolean[], text);
DROP FUNCTION IF EXISTS queen.timer_dead_letter(text, text, text, text, jsonb, text, uuid,
                                                text, bytea, text, integer, timestamptz);

-- Queues: unique per tenant. Discovery pops filter by tenant, then namespace or task.
ALTER TABLE queen.queues ADD COLUMN tenant text NOT NULL DEFAULT '';
ALTER TABLE queen.queues DROP CONSTRAINT queues_name_key;
ALTER TABLE queen.queues ADD CONSTRAINT queues_tenant_name_key UNIQUE (tenant, name);
DROP INDEX queen.queues_namespace_idx;
DROP INDEX queen.queues_task_idx;
CREATE INDEX queues_tenant_namespace_idx ON queen.queues (tenant, namespace);
CREATE INDEX queues_tenant_task_idx ON queen.queues (tenant, task);

-- KV rows (and with them locks and semaphores, which are KV rows): one key space per
-- tenant, compared in byte order like the namespace and the key.
ALTER TABLE queen.kv ADD COLUMN tenant text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE queen.kv DROP CONSTRAINT kv_pkey;
ALTER TABLE queen.kv ADD PRIMARY KEY (tenant, ns, key);

-- Timers: a timer names its destination queue, which is the tenant's.
ALTER TABLE queen.timers ADD COLUMN tenant text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE queen.timers DROP CONSTRAINT timers_pkey;
ALTER TABLE queen.timers ADD PRIMARY KEY (tenant, queue, timer_key);

-- Stream queries: names unique per tenant (their state is keyed by the query's id).
ALTER TABLE queen.stream_queries ADD COLUMN tenant text NOT NULL DEFAULT '';
ALTER TABLE queen.stream_queries DROP CONSTRAINT stream_queries_name_key;
ALTER TABLE queen.stream_queries
    ADD CONSTRAINT stream_queries_tenant_name_key UNIQUE (tenant, name);

-- Traces are looked up by name: names are per tenant. The tenant is the one of the
-- message's queue when the trace is written (the partition may be deleted later).
ALTER TABLE queen.traces ADD COLUMN tenant text NOT NULL DEFAULT '';
ALTER TABLE queen.trace_names ADD COLUMN tenant text NOT NULL DEFAULT '';
DROP INDEX queen.trace_names_name_idx;
CREATE INDEX trace_names_tenant_name_idx ON queen.trace_names (tenant, name, created_at DESC);

-- Analytics samples carry the queue's tenant, so a tenant's series is its queues' only.
ALTER TABLE queen.stats_samples ADD COLUMN tenant text NOT NULL DEFAULT '';

-- Quotas and rate limits per tenant (docs/security/tenants.md). NULL: unlimited. The
-- broker processes read this table every few seconds (core/tenancy/quotas.py); a tenant
-- without a row is unlimited.
CREATE TABLE queen.tenant_quotas (
    tenant                   text PRIMARY KEY,
    requests_per_second      double precision CHECK (requests_per_second > 0),
    request_burst            integer CHECK (request_burst > 0),
    messages_per_second      double precision CHECK (messages_per_second > 0),
    message_burst            integer CHECK (message_burst > 0),
    max_payload_bytes        integer CHECK (max_payload_bytes > 0),
    max_batch_size           integer CHECK (max_batch_size > 0),
    max_queues               integer CHECK (max_queues > 0),
    max_partitions_per_queue integer CHECK (max_partitions_per_queue > 0),
    max_retention_seconds    bigint CHECK (max_retention_seconds > 0),
    max_parked_pops          integer CHECK (max_parked_pops > 0),
    max_stored_bytes         bigint CHECK (max_stored_bytes > 0),
    updated_at               timestamptz NOT NULL DEFAULT now()
);

-- What each limited tenant stores, measured by one broker process at a time every
-- QUEEN_TENANT_USAGE_INTERVAL_MS (the process that claims a row older than that measures it):
-- the segments of its queues as stored, their dead-letter copies, its KV values and pending
-- timers' payloads. Only tenants with a max_stored_bytes get a row.
CREATE TABLE queen.tenant_usage (
    tenant       text PRIMARY KEY,
    stored_bytes bigint NOT NULL DEFAULT 0,
    measured_at  timestamptz NOT NULL DEFAULT '-infinity'
);
