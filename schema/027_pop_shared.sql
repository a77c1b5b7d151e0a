-- Version 27: concurrent pops of one kind served by one statement (docs/architecture/request-path.md).
--
-- queen.pop_shared runs queen.pop once per share, in one statement and one transaction:
-- every share is exactly the pop it stands for (its own lease id, its own scan pivot, the
-- same queue, group, partition, subscription rule, batch and options as its siblings), so
-- the one-lease-per-(partition, group) rule and every pop semantic are queen.pop's. A worker
-- sends it when several pops of the same request are waiting at once (core/engine/reads/claims.py):
-- one round trip and one commit instead of one per pop.
--
-- The shares are identical requests, so a share that delivers nothing proves the next ones
-- would deliver nothing either (it walked every eligible partition; those locked by other
-- transactions are being claimed by them): the loop stops there, and the remaining shares
-- cost nothing. Its fruitless answer (one row per addressed queue, partition_id null) is
-- returned for the share that got it, so the caller learns the queues to wait on.
--
-- Rows: queen.pop's rows, each prefixed with the 1-based share it belongs to.
CREATE FUNCTION queen.pop_shared(
    p_queue text, p_namespace text, p_task text, p_partition text, p_group text,
    p_named boolean, p_seed_mode text, p_seed_instant timestamptz, p_store_seed boolean,
    p_batch integer, p_partitions integer, p_auto_ack boolean, p_lease_seconds integer,
    p_lease_fallback integer, p_lease_ids text[], p_hints bigint[], p_pivots float8[],
    p_candidates integer)
RETURNS TABLE (share integer, queue_id bigint, queue text, partition_id bigint,
               partition text, span_start bigint, span_end bigint, retry_count integer,
               base_offset bigint, created_at timestamptz, blob bytea, last_offset bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    i         integer;
    delivered boolean;
    r         queen.pop_row;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_lease_ids), 0) LOOP
        delivered := false;
        FOR r IN
            SELECT * FROM queen.pop(p_queue, p_namespace, p_task, p_partition, p_group,
                                    p_named, p_seed_mode, p_seed_instant, p_store_seed,
                                    p_batch, p_partitions, p_auto_ack, p_lease_seconds,
                                    p_lease_fallback, p_lease_ids[i], p_hints, p_pivots[i],
                                    p_candidates)
        LOOP
            delivered := delivered OR r.partition_id IS NOT NULL;
            share := i;
            queue_id := r.queue_id;
            queue := r.queue;
            partition_id := r.partition_id;
            partition := r.partition;
            span_start := r.span_start;
            span_end := r.span_end;
            retry_count := r.retry_count;
            base_offset := r.base_offset;
            created_at := r.created_at;
            blob := r.blob;
            last_offset := r.last_offset;
            RETURN NEXT;
        END LOOP;
        EXIT WHEN NOT delivered;
    END LOOP;
END $$;
