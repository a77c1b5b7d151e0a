-- The schema on Citus: which table is distributed, which is everywhere, which stays home.
--
-- On a database with the `citus` extension the broker calls queen.distribute after the
-- migrations and the function files (core/storage/migrations.py). It is idempotent: each
-- start places what is not placed yet, so a table a later migration adds finds its place
-- too. On one PostgreSQL it exists and is never called.
--
-- * The tables of one partition's rows are distributed on the partition's id, colocated
--   with queen.log_partitions: a partition's head, segments, transactionId keys, cursors,
--   dead letters, pruning mark, lease rows and streams' state live in one shard, on one
--   node. (queen.log_leases is distributed on `route`, a number of the shard it belongs
--   to.) The statistics' counters are not: every process adds its deltas of every
--   partition in one statement every METRICS_FLUSH_MS, off the hot path, which on a
--   distributed table would be a statement on every shard; they stay on the coordinator.
-- * Small tables the log's statements read (queues, the partition directory, consumer
--   groups' subscriptions, Kafka topics) are reference tables, a copy on every node: every
--   node reads them locally, and writing them (a queue or a partition created, a group's
--   first pop of a queue) writes every node.
-- * Every other table stays a plain table of the coordinator, which Citus leaves alone: KV,
--   timers, ephemeral queues, streams' queries, traces, statistics, the Kafka election, the
--   switches, the migrator's ledger. The broker sends their statements to the coordinator
--   (core/storage/cluster.py); Citus joins them with the tables above where a statement
--   does (it plans such a join in steps).
-- * Every function exists on every node (Citus propagates what the coordinator creates);
--   the log's calls are delegated: Citus runs each on the node of the shard its first
--   argument falls in (a route, core/storage/shards.py), where every statement in it then
--   reads and writes that node's rows only. They plan per call there (plan_cache_mode
--   auto instead of force_generic_plan): Citus cannot plan an INSERT ... SELECT generically.
--
-- The shard count of a new deployment is the server's citus.shard_count when the first
-- table is distributed (docs/deploying/citus.md: choosing it).

-- Place every table and function; one row per thing placed now (none once all are).
CREATE OR REPLACE FUNCTION queen.distribute()
RETURNS TABLE (placed text)
LANGUAGE plpgsql AS $$
DECLARE
    v_anchor    constant text := 'queen.log_partitions';
    v_colocated constant text[] := ARRAY[
        'queen.log_segments', 'queen.log_txn_index', 'queen.log_consumers', 'queen.log_dlq',
        'queen.log_dlq_segments', 'queen.log_txn_pruned', 'queen.log_leases',
        'queen.stream_state', 'queen.stream_partitions'];
    v_reference constant text[] := ARRAY[
        'queen.queues', 'queen.partition_directory', 'queen.consumer_subscriptions',
        'queen.kafka_topics'];
    v_delegated constant text[] := ARRAY[
        'append_partitions', 'pop_ready', 'ack', 'extend_leases', 'link_lease',
        'release_cursors', 'forget_leases', 'prune_keys'];
    v_table     text;
    f           record;
BEGIN
    -- One transaction distributes tables and creates reference tables that others refer
    -- to (Kafka topics to queues): Citus must then use one connection per node throughout.
    PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    IF NOT EXISTS (SELECT 1 FROM citus_tables WHERE table_name = v_anchor::regclass) THEN
        PERFORM create_distributed_table(v_anchor, 'id');
        placed := v_anchor || ': distributed on id';
        RETURN NEXT;
    END IF;
    FOREACH v_table IN ARRAY v_colocated LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM citus_tables WHERE table_name = v_table::regclass);
        PERFORM create_distributed_table(
            v_table, CASE v_table WHEN 'queen.log_leases' THEN 'route' ELSE 'partition_id' END,
            colocate_with => v_anchor);
        placed := v_table || ': distributed, colocated with ' || v_anchor;
        RETURN NEXT;
    END LOOP;
    FOREACH v_table IN ARRAY v_reference LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM citus_tables WHERE table_name = v_table::regclass);
        PERFORM create_reference_table(v_table);
        placed := v_table || ': reference';
        RETURN NEXT;
    END LOOP;
    FOR f IN
        SELECT p.oid::regprocedure AS fn, p.proname, p.proconfig, o.objid IS NOT NULL AS known,
               o.distribution_argument_index IS NOT NULL AS delegated
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          LEFT JOIN pg_dist_object o ON o.classid = 'pg_proc'::regclass AND o.objid = p.oid
         WHERE n.nspname = 'queen' AND p.prokind = 'f' ORDER BY 1
    LOOP
        IF f.proname = ANY(v_delegated) AND NOT f.delegated THEN
            PERFORM create_distributed_function(f.fn, 'p_route',
                                                colocate_with => v_anchor);
            placed := f.fn::text || ': delegated by p_route';
            RETURN NEXT;
        ELSIF NOT f.known THEN
            PERFORM create_distributed_function(f.fn);
            placed := f.fn::text || ': on every node';
            RETURN NEXT;
        END IF;
        IF 'plan_cache_mode=force_generic_plan' = ANY(f.proconfig) THEN
            EXECUTE format('ALTER FUNCTION %s SET plan_cache_mode = auto', f.fn);
        END IF;
    END LOOP;
END $$;

-- Keep the placement of a partition's shard fixed until the transaction ends: called before
-- a call first reads a partition's rows to decide what it writes there (a claim's cursor, an
-- ack's, a stream cycle's, the reaper's release of a lease, an append's head, a lease
-- extension's lease rows (by their route, which falls in the shard as a partition id does),
-- a replayed dead letter: schema/queries/dlq.sql). Citus fixes a shard's placement for the
-- statements that write it (each takes the shard's placement lock, in share mode, before it
-- looks the placement up) but not for those that only read it, SELECT ... FOR UPDATE
-- included. During a shard
-- move a read could then be served by the old copy after writes had gone to the new one: on
-- a node the move's commit had not reached yet (its two-phase commit reaches the nodes one
-- by one; a broker sends a call to the node its map names, the old one for up to 30 s), a
-- claim read a cursor the new copy had already moved past, locked that old row, and wrote
-- `committed = start - 1` on the new copy once the move let writes through: the cursor went
-- back and acknowledged messages were delivered again (tests/integration/test_citus.py).
-- Taking that lock first makes the reads wait for the move as the writes do, and then read
-- the copy the writes go to. On one PostgreSQL (no Citus), or for a null id, it does nothing.
CREATE OR REPLACE FUNCTION queen.hold_placement(p_partition_id bigint)
RETURNS void
LANGUAGE plpgsql STRICT
AS $$
BEGIN
    IF to_regprocedure('pg_catalog.lock_shard_metadata(integer, bigint[])') IS NULL THEN
        RETURN;
    END IF;
    -- ShareLock (5): the mode of Citus's writes, which only a move's or split's
    -- ExclusiveLock conflicts with. Colocated shards share the lock. Citus lets the
    -- tables' owner take it: the broker's role, which applies the schema.
    PERFORM pg_catalog.lock_shard_metadata(5, ARRAY[
        pg_catalog.get_shard_id_for_distribution_column('queen.log_partitions', p_partition_id)]);
END $$;
