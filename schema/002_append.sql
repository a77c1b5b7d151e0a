-- The write path in one round trip: queen.append_segment runs as a single autocommitted
-- statement, so the partition lock is held only for the work below and never across a network
-- round trip to the broker.

-- Create the queue (default options, derived namespace/task) and the partition if missing;
-- answer ids. Safe under concurrency: ON CONFLICT DO NOTHING, then read back.
CREATE OR REPLACE FUNCTION queen.ensure_partition(
    p_queue text, p_partition text, p_namespace text, p_task text, p_default_options jsonb,
    OUT queue_id bigint, OUT partition_id bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT q.id INTO queue_id FROM queen.queues q WHERE q.name = p_queue;
    IF queue_id IS NULL THEN
        INSERT INTO queen.queues (name, namespace, task, options)
        VALUES (p_queue, p_namespace, p_task, p_default_options)
        ON CONFLICT (name) DO NOTHING;
        SELECT q.id INTO queue_id FROM queen.queues q WHERE q.name = p_queue;
    END IF;
    SELECT p.id INTO partition_id FROM queen.log_partitions p
     WHERE p.queue_id = ensure_partition.queue_id AND p.name = p_partition;
    IF partition_id IS NULL THEN
        INSERT INTO queen.log_partitions (queue_id, name)
        VALUES (ensure_partition.queue_id, p_partition)
        ON CONFLICT ON CONSTRAINT log_partitions_queue_id_name_key DO NOTHING;
        SELECT p.id INTO partition_id FROM queen.log_partitions p
         WHERE p.queue_id = ensure_partition.queue_id AND p.name = p_partition;
    END IF;
END $$;

-- Append one segment to a partition, or report duplicates and write nothing.
--   p_partition_id  the partition
--   p_txids         transactionIds of the frames in p_blob, in frame order (already unique)
--   p_message_ids   message ids of the frames, same order
--   p_blob          zstd of the frames
-- Under the partition row lock: look the transactionIds up inside the queue's dedup window;
-- if any is found, answer their positions (1-based) and stored message ids and write nothing
-- (the caller rebuilds the blob without them and calls again). Otherwise allocate offsets,
-- stamp created_at (never below the partition's previous stamp, so it is monotone even if the
-- clock steps back), insert the segment and its index rows, bump last_offset.
-- Raises QN001 when the partition no longer exists (its queue was deleted).
CREATE OR REPLACE FUNCTION queen.append_segment(
    p_partition_id bigint, p_txids text[], p_message_ids uuid[], p_blob bytea,
    OUT base_offset bigint, OUT created_at timestamptz,
    OUT dup_positions integer[], OUT dup_message_ids uuid[])
LANGUAGE plpgsql AS $$
DECLARE
    v_last   bigint;
    v_prev   timestamptz;
    v_window integer;
    v_now    timestamptz;
    v_count  integer := cardinality(p_txids);
BEGIN
    SELECT p.last_offset, p.last_write_at,
           coalesce((q.options ->> 'dedupWindowSeconds')::integer, 3600)
      INTO v_last, v_prev, v_window
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_partition_id
       FOR UPDATE OF p;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'partition % does not exist', p_partition_id USING ERRCODE = 'QN001';
    END IF;
    -- Read the clock after the lock: a writer that waited for the lock stamps a later time.
    v_now := greatest(clock_timestamp(), v_prev);

    IF v_window > 0 THEN
        SELECT array_agg(d.pos ORDER BY d.pos), array_agg(d.message_id ORDER BY d.pos)
          INTO dup_positions, dup_message_ids
          FROM (SELECT u.pos, hit.message_id
                  FROM unnest(p_txids) WITH ORDINALITY AS u(txid, pos)
                  CROSS JOIN LATERAL (
                        SELECT i.message_id FROM queen.log_txn_index i
                         WHERE i.partition_id = p_partition_id
                           AND i.txn_hash = hashtextextended(u.txid, 0)
                           AND i.transaction_id = u.txid
                           AND i.created_at > v_now - make_interval(secs => v_window)
                         ORDER BY i.msg_offset LIMIT 1) hit) d;
        IF dup_positions IS NOT NULL THEN
            RETURN;
        END IF;
    END IF;

    base_offset := v_last + 1;
    created_at := v_now;
    INSERT INTO queen.log_segments
        (partition_id, base_offset, last_offset, message_count, created_at, blob)
    VALUES (p_partition_id, base_offset, v_last + v_count, v_count, v_now, p_blob);
    INSERT INTO queen.log_txn_index
        (partition_id, txn_hash, msg_offset, transaction_id, message_id, created_at)
    SELECT p_partition_id, hashtextextended(u.txid, 0), v_last + u.pos, u.txid, u.mid, v_now
      FROM unnest(p_txids, p_message_ids) WITH ORDINALITY AS u(txid, mid, pos);
    UPDATE queen.log_partitions
       SET last_offset = v_last + v_count, last_write_at = v_now
     WHERE id = p_partition_id;
END $$;
