-- Transaction keys: how the database names a transactionId.
--
-- The transactionId index (queen.log_txn_index, migration 022) keys each id by 128 bits of
-- SHA-256 of its text instead of the text itself: a row is 40 bytes whatever the id's
-- length (up to 64 KiB), and the key settles equality on its own inside the database (a
-- collision needs about 2^64 ids in one partition). The write path (dedup), acks, traces and
-- stream cycles all compute it here, so the rule is in one place.

-- The key of a transactionId. STABLE because textsend is (encoding); the key is the same for
-- the same text in a given database.
CREATE OR REPLACE FUNCTION queen.txn_key(p_transaction_id text) RETURNS uuid
LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $$ SELECT encode(substring(sha256(textsend(p_transaction_id)) FROM 1 FOR 16), 'hex')::uuid $$;

-- The reaper's pruning on Citus (core/upkeep/maintenance.py): the partitions a read of every
-- shard found with rows older than their queue's keep horizon lose those rows here, one call
-- per shard, each partition by its key, and have their mark in log_txn_pruned raised past
-- them (acks search the segments below it: schema/functions/40_ack.sql). On one PostgreSQL
-- the reaper's own statement does both at once (queries/reaper.sql).
--   p_route        the shard's route (Citus runs the call there)
--   p_partitions   partitions of that shard
--   p_below        per partition: one past the highest offset the read found to prune
--   p_cutoffs      per partition: rows appended before it go
-- Answers the rows deleted.
CREATE OR REPLACE FUNCTION queen.prune_keys(p_route bigint, p_partitions bigint[],
                                            p_below bigint[], p_cutoffs timestamptz[])
RETURNS bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    v_pid    bigint;
    v_below  bigint;
    v_cutoff timestamptz;
    v_rows   bigint;
    v_total  bigint := 0;
BEGIN
    FOR i IN 1 .. cardinality(p_partitions) LOOP
        v_pid := p_partitions[i];  -- plain variables (see queen.append_partitions)
        v_below := p_below[i];
        v_cutoff := p_cutoffs[i];
        DELETE FROM queen.log_txn_index x
         WHERE x.partition_id = v_pid AND x.msg_offset < v_below AND x.created_at < v_cutoff;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        IF v_rows > 0 THEN
            INSERT INTO queen.log_txn_pruned AS m (partition_id, below) VALUES (v_pid, v_below)
            ON CONFLICT (partition_id) DO UPDATE SET below = greatest(m.below, excluded.below);
        END IF;
        v_total := v_total + v_rows;
    END LOOP;
    RETURN v_total;
END $$;
