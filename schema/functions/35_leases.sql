-- Lease extension (wire-protocol §4.8): every live lease held under a leaseId gets
-- expires = max(current expiry, now + seconds); expired, released or unknown leases are not
-- revived.
--
-- An extension names only the leaseId. On one PostgreSQL the cursors are found by it (their
-- worker_id index). On Citus that search would read every shard, so there each statement
-- of a pop records the partitions it leased on its shard, under that shard's route
-- (queen.log_leases, migration 150), and the leaseId names the first shard
-- (core/storage/shards.py): the broker passes its route, Citus runs the call on that shard's
-- node, and the call reads the lease's row and then each cursor by key, on that node only;
-- the row names the routes of the other shards the lease spans, where the broker sends the
-- same call next (core/engine/batching/acks.py).

-- Extend leases; one row per cursor extended: its lease id and new expiry; and, with a
-- route, one row per lease that has parts on other shards: its lease id and their routes.
--   p_route    the route of the shard the leases were claimed on, or null: search the cursors
--              by lease id (one PostgreSQL; on Citus, a lease the broker cannot place)
--   p_leases   lease ids (distinct)
--   p_secs     seconds to extend each by
--   p_tenants  the tenant of the caller of each (migration 140): only leases on that
--              tenant's queues are extended
CREATE OR REPLACE FUNCTION queen.extend_leases(p_route bigint, p_leases text[],
                                               p_secs float8[], p_tenants text[])
RETURNS TABLE (lease_id text, lease_expires_at timestamptz, routes bigint[])
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    v_lease text;
    v_secs  float8;
    v_tenant text;
    v_owner text;
    v_pid   bigint;
    v_ids   bigint[];
    v_routes bigint[];
    v_until timestamptz;
BEGIN
    IF p_route IS NULL THEN
        FOR i IN 1 .. cardinality(p_leases) LOOP
            v_lease := p_leases[i];
            v_tenant := coalesce(p_tenants[i], '');
            -- a value, not arithmetic on a column: Citus evaluates now() once, before
            v_until := now() + make_interval(secs => p_secs[i]);
            RETURN QUERY
                UPDATE queen.log_consumers c
                   SET lease_expires_at = greatest(c.lease_expires_at, v_until)
                  FROM queen.partition_directory d JOIN queen.queues q ON q.id = d.queue_id
                 WHERE c.worker_id = v_lease AND c.lease_expires_at > now()
                   AND d.partition_id = c.partition_id AND q.tenant = v_tenant
                RETURNING c.worker_id, c.lease_expires_at, NULL::bigint[];
        END LOOP;
        RETURN;
    END IF;
    -- On Citus, before the lease rows are read: the row names the cursors written below and
    -- the other shards the caller extends next, which a read of the old copy during a shard
    -- move would miss (those its pop linked on the new one: 90_distribution.sql). A route
    -- falls in its shard as a partition id does.
    PERFORM queen.hold_placement(p_route);
    FOR i IN 1 .. cardinality(p_leases) LOOP
        v_lease := p_leases[i];
        v_secs := p_secs[i];
        v_tenant := coalesce(p_tenants[i], '');
        SELECT l.partition_ids, l.routes INTO v_ids, v_routes FROM queen.log_leases l
         WHERE l.route = p_route AND l.lease_id = v_lease;
        CONTINUE WHEN NOT FOUND;
        -- A lease is one pop's, on one tenant's queues: its first partition says whose.
        v_pid := v_ids[1];
        SELECT q.tenant INTO v_owner
          FROM queen.partition_directory d JOIN queen.queues q ON q.id = d.queue_id
         WHERE d.partition_id = v_pid;
        CONTINUE WHEN v_owner IS DISTINCT FROM v_tenant;
        v_until := now() + make_interval(secs => v_secs);
        FOREACH v_pid IN ARRAY v_ids LOOP
            RETURN QUERY
                UPDATE queen.log_consumers c
                   SET lease_expires_at = greatest(c.lease_expires_at, v_until)
                 WHERE c.partition_id = v_pid AND c.worker_id = v_lease
                   AND c.lease_expires_at > now()
                RETURNING c.worker_id, c.lease_expires_at, NULL::bigint[];
        END LOOP;
        UPDATE queen.log_leases l
           SET expires_at = greatest(l.expires_at, v_until)
         WHERE l.route = p_route AND l.lease_id = v_lease;
        IF cardinality(v_routes) > 0 THEN
            lease_id := v_lease;
            lease_expires_at := NULL;
            routes := v_routes;
            RETURN NEXT;
        END IF;
    END LOOP;
END $$;

-- A pop's lease spans shards (one claim statement each): the row of its first shard (the
-- one its id names) learns the routes of the others, where an extension goes next.
--   p_route    the first shard's route (Citus runs the call there)
--   p_lease    the lease id
--   p_routes   the routes of the other shards with parts of the lease
CREATE OR REPLACE FUNCTION queen.link_lease(p_route bigint, p_lease text, p_routes bigint[])
RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
BEGIN
    UPDATE queen.log_leases l
       SET routes = ARRAY(SELECT DISTINCT unnest(l.routes || p_routes))
     WHERE l.route = p_route AND l.lease_id = p_lease;
END $$;

-- The reaper on Citus (core/upkeep/maintenance.py): cursors found by a read of every shard
-- (leases past their expiry, or retryDelay not-before times passed) are released here, one
-- call per shard, each cursor by its key: no write spans two nodes. On one PostgreSQL the
-- reaper's own statements do both at once (queries/reaper.sql).
--   p_route        the shard's route (Citus runs the call there)
--   p_partitions, p_groups   the cursors, as the read found them
--   p_due          false: release expired leases; true: clear passed not-before times
-- One row per cursor changed: its queue and partition. A cursor a pop or ack is working on
-- is left to them (SKIP LOCKED); one whose lease was extended meanwhile is left as it is.
CREATE OR REPLACE FUNCTION queen.release_cursors(p_route bigint, p_partitions bigint[],
                                                 p_groups text[], p_due boolean)
RETURNS TABLE (queue_id bigint, partition_id bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    v_pid   bigint;
    v_group text;
BEGIN
    FOR i IN 1 .. cardinality(p_partitions) LOOP
        v_pid := p_partitions[i];
        v_group := p_groups[i];
        PERFORM queen.hold_placement(v_pid);  -- read, then written (90_distribution.sql)
        IF p_due THEN
            PERFORM 1 FROM queen.log_consumers c
             WHERE c.partition_id = v_pid AND c.consumer_group = v_group
               AND c.not_before <= now()
               FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            UPDATE queen.log_consumers c SET not_before = NULL
             WHERE c.partition_id = v_pid AND c.consumer_group = v_group;
        ELSE
            PERFORM 1 FROM queen.log_consumers c
             WHERE c.partition_id = v_pid AND c.consumer_group = v_group
               AND c.lease_expires_at <= now()
               FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            UPDATE queen.log_consumers c
               SET batch_end = NULL, worker_id = NULL, lease_expires_at = NULL
             WHERE c.partition_id = v_pid AND c.consumer_group = v_group;
        END IF;
        queue_id := (SELECT p.queue_id FROM queen.log_partitions p WHERE p.id = v_pid);
        partition_id := v_pid;
        RETURN NEXT;
    END LOOP;
END $$;

-- Forget the lease rows of a shard whose leases ended more than `p_after_seconds` ago (an
-- extension of them would find nothing to extend anyway). Answers how many went.
CREATE OR REPLACE FUNCTION queen.forget_leases(p_route bigint, p_after_seconds integer)
RETURNS bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    v_count bigint;
BEGIN
    DELETE FROM queen.log_leases l
     WHERE l.route = p_route
       AND l.expires_at < now() - make_interval(secs => p_after_seconds);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END $$;
