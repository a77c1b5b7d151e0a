-- Version 4: several partitions' flushes in one statement, hence one transaction and one WAL
-- flush (docs/architecture/request-path.md, the write path). Small pushes spread over many partitions otherwise
-- pay one commit each.

-- Append one segment per partition by calling queen.append_segment for each, in the order
-- given (callers pass partition ids ascending, so concurrent callers lock rows in the same
-- order and cannot deadlock). A partition whose items meet stored duplicates writes nothing
-- and answers its dup_positions; the others are written. The arrays are flat: partition i
-- owns the next p_counts[i] entries of p_txids and p_message_ids.
-- Raises QN001 (from append_segment) if a partition no longer exists: the caller then
-- retries partition by partition.
CREATE OR REPLACE FUNCTION queen.append_segments(
    p_partition_ids bigint[], p_counts integer[], p_txids text[], p_message_ids uuid[],
    p_blobs bytea[])
RETURNS TABLE (partition_id bigint, base_offset bigint, created_at timestamptz,
               dup_positions integer[], dup_message_ids uuid[])
LANGUAGE plpgsql AS $$
DECLARE
    v_first integer := 1;
    v_last  integer;
    r       record;
BEGIN
    FOR i IN 1 .. cardinality(p_partition_ids) LOOP
        v_last := v_first + p_counts[i] - 1;
        SELECT * INTO r FROM queen.append_segment(
            p_partition_ids[i], p_txids[v_first:v_last], p_message_ids[v_first:v_last],
            p_blobs[i]);
        partition_id := p_partition_ids[i];
        base_offset := r.base_offset;
        created_at := r.created_at;
        dup_positions := r.dup_positions;
        dup_message_ids := r.dup_message_ids;
        RETURN NEXT;
        v_first := v_last + 1;
    END LOOP;
END $$;
