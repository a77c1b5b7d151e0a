-- Streams (wire-protocol-extensions §18): registering a query, deleting one, and the cycle.
--
-- A query is a named operator chain (the client's `Stream`) reading a source queue through
-- the consumer group `streams.<name>` and writing a sink queue; its tables are in migration
-- 080. A cycle commits, in one statement and one transaction, what the client computed from
-- one leased batch: state upserts/deletes, sink pushes (through queen.append) and the source
-- ack. Cycles of one query take the query's advisory lock in shared mode and their
-- (query, partition) lock exclusively; a reset or a delete of the query takes the query's
-- lock exclusively, before any row lock.

-- Register a query (§18.1): fresh | same | reset | conflict, and its id. A concurrent
-- registration of the same name waits on the row lock, so exactly one of them inserts.
-- Names are per tenant (migration 140); the source and sink are queues of that tenant.
CREATE OR REPLACE FUNCTION queen.stream_register(
    p_tenant text, p_name text, p_source text, p_sink text, p_hash text, p_reset boolean)
RETURNS TABLE (query_id uuid, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    INSERT INTO queen.stream_queries (tenant, name, source_queue, sink_queue, config_hash)
    VALUES (p_tenant, p_name, p_source, p_sink, p_hash)
    ON CONFLICT ON CONSTRAINT stream_queries_tenant_name_key DO NOTHING
    RETURNING id INTO query_id;
    IF query_id IS NOT NULL THEN
        outcome := 'fresh';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT q.id INTO query_id FROM queen.stream_queries q
     WHERE q.tenant = p_tenant AND q.name = p_name;
    IF p_reset THEN
        -- Serialised with the query's cycles, which take the query's advisory lock in
        -- shared mode, before any row lock (a cycle waiting for a row lock this holds
        -- while this waits for the cycle would deadlock).
        PERFORM pg_advisory_xact_lock(hashtextextended('queen.stream:' || query_id::text, 0));
    END IF;
    SELECT q.id, q.config_hash INTO r FROM queen.stream_queries q WHERE q.id = query_id
       FOR UPDATE;
    IF r.config_hash = p_hash THEN
        outcome := 'same';
    ELSIF p_reset THEN
        DELETE FROM queen.stream_state s WHERE s.query_id = r.id;
        outcome := 'reset';
    ELSE
        outcome := 'conflict';
        RETURN NEXT;
        RETURN;
    END IF;
    UPDATE queen.stream_queries
       SET source_queue = p_source, sink_queue = p_sink, config_hash = p_hash,
           updated_at = now()
     WHERE id = r.id;
    RETURN NEXT;
END $$;

-- Delete a tenant's query with its state; its id, or null when there is none.
CREATE OR REPLACE FUNCTION queen.stream_delete_query(p_tenant text, p_name text) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    SELECT q.id INTO v_id FROM queen.stream_queries q
     WHERE q.tenant = p_tenant AND q.name = p_name;
    IF v_id IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('queen.stream:' || v_id::text, 0));
    DELETE FROM queen.stream_state s WHERE s.query_id = v_id;
    DELETE FROM queen.stream_partitions s WHERE s.query_id = v_id;
    DELETE FROM queen.stream_queries q WHERE q.id = v_id;
    RETURN v_id;
END $$;

-- One cycle (§18.3), as one statement: the caller's transaction, or its own when it runs
-- autocommitted (the common case: one round trip per cycle).
--   p_tenant                          the caller's tenant: another tenant's query or source
--                                     partition is answered as one that does not exist,
--                                     and the sink queues are this tenant's
--   p_query, p_partition, p_group     the cycle's address (p_partition: the source partition)
--   p_deletes, p_keys, p_values       state ops in order (p_values: JSON text; ignored for
--                                     a delete)
--   p_queues .. p_encrypted           the sink pushes, as queen.append takes them (empty
--                                     arrays: none)
--   p_ack                             whether the cycle acks; then p_lease (mandatory
--                                     leaseId), p_ack_ok (ok vs nack), p_release,
--                                     p_count (messages acked when the lease is kept),
--                                     p_ack_txid (the last acked message's transactionId,
--                                     or null)
-- One row: `error` (null when applied; else nothing was changed), the source queue, what
-- the ack did, the partition to wake (a span became claimable), how many state ops were
-- applied, and the written sink partitions (ids and the first offset and time of each).
-- Sink pushes that meet a stored duplicate, or were built for the other encryption setting,
-- raise SQLSTATE QN010 before anything is written: the caller then runs the cycle again
-- in a transaction of its own, with the pushes written by the ordinary write path.
CREATE OR REPLACE FUNCTION queen.stream_cycle(
    p_tenant text, p_query uuid, p_partition bigint, p_group text,
    p_deletes boolean[], p_keys text[], p_values text[],
    p_queues text[], p_partitions text[], p_namespaces text[], p_tasks text[],
    p_options jsonb, p_segments integer[], p_frames integer[], p_blobs bytea[],
    p_txids text[], p_repeats boolean[], p_encrypted boolean[],
    p_ack boolean, p_lease text, p_ack_ok boolean, p_release boolean, p_count bigint,
    p_ack_txid text)
RETURNS TABLE (error text, source_queue text, ack_count bigint, lease_released boolean,
               wake_queue bigint, wake_partition bigint, state_applied integer,
               sink_queue_ids bigint[], sink_partition_ids bigint[], sink_bases bigint[],
               sink_times timestamptz[])
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_consumed_at timestamptz;
    v_source  text;
    v_qid     bigint;
    v_log_start bigint;
    v_last    bigint;
    c         record;
    v_new     bigint;
    v_at      bigint;
    a         record;
BEGIN
    ack_count := 0;
    lease_released := false;
    state_applied := 0;
    sink_queue_ids := '{}';
    sink_partition_ids := '{}';
    sink_bases := '{}';
    sink_times := '{}';
    -- Serialise cycles of one (query, partition), idle flushes too; a reset of the query
    -- takes the query's lock exclusively.
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('queen.stream:' || p_query::text, 0));
    PERFORM pg_advisory_xact_lock(hashtextextended(
        'queen.stream:' || p_query::text || ':' || p_partition::text, 0));
    -- On Citus, before the source cursor is read: the ack below writes the copy the read
    -- saw (a shard move in between: 90_distribution.sql, queen.hold_placement).
    PERFORM queen.hold_placement(p_partition);

    SELECT q.source_queue INTO v_source FROM queen.stream_queries q
     WHERE q.id = p_query AND q.tenant = p_tenant;
    IF NOT FOUND THEN
        error := 'query not found';
        RETURN NEXT;
        RETURN;
    END IF;
    source_queue := v_source;
    SELECT p.queue_id, p.log_start, p.last_offset INTO v_qid, v_log_start, v_last
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_partition AND q.tenant = p_tenant;
    IF NOT FOUND THEN
        error := 'partition not found';
        RETURN NEXT;
        RETURN;
    END IF;

    -- The ack is checked before anything is written, so a refused cycle changes nothing.
    IF p_ack THEN
        SELECT x.committed, x.batch_end, x.worker_id,
               (x.worker_id IS NOT NULL AND x.lease_expires_at > now()) AS live
          INTO c
          FROM queen.log_consumers x
         WHERE x.partition_id = p_partition AND x.consumer_group = p_group
           FOR UPDATE;
        IF NOT FOUND OR NOT c.live OR c.worker_id IS DISTINCT FROM p_lease THEN
            error := 'invalid or expired lease';
            RETURN NEXT;
            RETURN;
        END IF;
        IF p_ack_ok AND c.batch_end IS NULL THEN
            error := 'no leased batch';
            RETURN NEXT;
            RETURN;
        END IF;
        IF p_ack_ok AND NOT p_release AND p_ack_txid IS NOT NULL THEN
            -- A partial ack keeps the lease, so a resent cycle whose first answer was lost
            -- would pass the lease check again: its last message already committed means
            -- this cycle was applied.
            SELECT max(i.msg_offset) INTO v_at FROM queen.log_txn_index i
             WHERE i.partition_id = p_partition AND i.txn_key = queen.txn_key(p_ack_txid)
               AND i.msg_offset <= c.batch_end;
            IF v_at IS NOT NULL AND v_at <= c.committed THEN
                error := 'cycle already applied';
                RETURN NEXT;
                RETURN;
            END IF;
        END IF;
    END IF;

    IF cardinality(p_queues) > 0 THEN
        FOR a IN SELECT * FROM queen.append(array_fill(p_tenant, ARRAY[cardinality(p_queues)]),
                                            p_queues, p_partitions, p_namespaces, p_tasks,
                                            p_options, p_segments, p_frames, p_blobs,
                                            p_txids, p_repeats, p_encrypted) LOOP
            IF a.base_offset IS NULL THEN
                RAISE EXCEPTION 'stream cycle: sink push needs the write path'
                      USING ERRCODE = 'QN010';
            END IF;
            sink_queue_ids := sink_queue_ids || a.queue_id;
            sink_partition_ids := sink_partition_ids || a.partition_id;
            sink_bases := sink_bases || a.base_offset;
            sink_times := sink_times || a.created_at;
        END LOOP;
    END IF;

    IF cardinality(p_keys) > 0 THEN
        -- In order: the last op on a key wins (a delete after an upsert deletes it).
        WITH ops AS (
            SELECT DISTINCT ON (o.key) o.key, o.del, o.val
              FROM unnest(p_keys, p_deletes, p_values) WITH ORDINALITY AS o(key, del, val, n)
             ORDER BY o.key, o.n DESC),
        gone AS (
            DELETE FROM queen.stream_state s USING ops
             WHERE ops.del AND s.query_id = p_query AND s.partition_id = p_partition
               AND s.key = ops.key)
        INSERT INTO queen.stream_state AS s (query_id, partition_id, key, value, updated_at)
        SELECT p_query, p_partition, ops.key, ops.val::jsonb, now() FROM ops WHERE NOT ops.del
        ON CONFLICT ON CONSTRAINT stream_state_pkey
        DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at;
        state_applied := cardinality(p_keys);
    END IF;

    IF p_ack THEN
        IF p_ack_ok AND p_release THEN
            v_new := c.batch_end;
        ELSIF p_ack_ok THEN
            -- `count` retained offsets from the cursor (retention gaps skipped), never past
            -- the leased batch.
            v_new := CASE WHEN p_count > 0
                          THEN least(greatest(c.committed + 1, v_log_start) + p_count - 1,
                                     c.batch_end)
                          ELSE c.committed END;
            v_new := greatest(v_new, c.committed);
        ELSE
            v_new := c.committed;  -- nack: the batch redelivers at once
        END IF;
        lease_released := p_release OR NOT p_ack_ok;
        ack_count := CASE WHEN p_ack_ok THEN v_new - c.committed ELSE 0 END;
        v_consumed_at := CASE WHEN v_new > c.committed THEN now() END;
        UPDATE queen.log_consumers x
           SET committed = v_new,
               retry_count = CASE WHEN p_ack_ok THEN 0 ELSE x.retry_count END,
               batch_end = CASE WHEN lease_released THEN NULL ELSE x.batch_end END,
               worker_id = CASE WHEN lease_released THEN NULL ELSE x.worker_id END,
               lease_expires_at = CASE WHEN lease_released THEN NULL
                                       ELSE x.lease_expires_at END,
               not_before = CASE WHEN lease_released THEN NULL ELSE x.not_before END,
               total_consumed = x.total_consumed + (v_new - c.committed),
               -- (a variable: Citus refuses now() inside a CASE of an UPDATE)
               last_consumed_at = coalesce(v_consumed_at, x.last_consumed_at)
         WHERE x.partition_id = p_partition AND x.consumer_group = p_group;
        IF lease_released AND v_new < v_last THEN
            wake_queue := v_qid;
            wake_partition := p_partition;
        END IF;
    END IF;

    INSERT INTO queen.stream_partitions AS sp (query_id, partition_id, cycles, last_cycle_at)
    VALUES (p_query, p_partition, 1, now())
    ON CONFLICT ON CONSTRAINT stream_partitions_pkey
    DO UPDATE SET cycles = sp.cycles + 1, last_cycle_at = excluded.last_cycle_at;
    RETURN NEXT;
END $$;
