-- Group positions: where each consumer group stands on every partition it reads, cursor or
-- not.
--
-- Lag used to be counted over cursor rows only, so a partition a group had never popped (a
-- lane created after the group's last pop, or one its pops have not reached yet) showed no
-- lag although the group's next pop would deliver it. queen.group_positions is the one
-- definition every lag figure reads (the consumer-group routes and the `lag` / `groups`
-- commands, the dashboard, the Prometheus pop lag, the analytics samples): one row per
-- (group, partition of a queue the group reads), with the group's cursor where it has one,
-- else the position its subscription rule would seed the cursor at on first contact, as
-- queen.pop_claim does:
-- * mode `all` (and the queue-mode group, which always starts at the oldest message): from
--   the first retained message (log_start - 1);
-- * mode `new` or `timestamp` with a stored instant: after the last message written before
--   that instant (a stored `new` is the instant it was first chosen);
-- * no stored choice (a record only the partition route wrote, e.g. to store a conflation
--   policy, or cursors a seek created with no record): from the first retained message, as
--   the depth route counts a group without a cursor (extensions §21.2).
-- A group reads a queue when it has a stored subscription on it or any cursor on one of its
-- partitions.

-- The last offset of a partition written before p_instant (log_start - 1 when none is).
-- Segments are stamped in offset order (the append never stamps below the previous stamp),
-- so a binary search over the primary key finds it in O(log n) probes where a backward scan
-- would read every segment written since the instant, again on every scrape; a partition
-- with nothing written since the instant costs no probe, one written only since it costs one.
CREATE OR REPLACE FUNCTION queen.offset_before(
    p_partition bigint, p_log_start bigint, p_last_offset bigint, p_last_write timestamptz,
    p_instant timestamptz)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_lo  bigint := p_log_start;       -- every retained offset below it: written before
    v_hi  bigint := p_last_offset + 1;  -- every offset from it on: written at or after
    v_mid bigint;
    v_base bigint;
    v_last bigint;
    v_at  timestamptz;
BEGIN
    IF p_last_write IS NULL OR p_last_write < p_instant THEN
        RETURN greatest(p_last_offset, p_log_start - 1);  -- nothing written since
    END IF;
    -- Everything retained written since (a lane created after the instant): one probe.
    SELECT s.created_at INTO v_at
      FROM queen.log_segments s
     WHERE s.partition_id = p_partition AND s.base_offset <= p_log_start
     ORDER BY s.base_offset DESC LIMIT 1;
    IF v_at >= p_instant THEN
        RETURN p_log_start - 1;
    END IF;
    WHILE v_lo < v_hi LOOP
        v_mid := v_lo + (v_hi - v_lo) / 2;
        SELECT s.base_offset, s.last_offset, s.created_at INTO v_base, v_last, v_at
          FROM queen.log_segments s
         WHERE s.partition_id = p_partition AND s.base_offset <= v_mid
         ORDER BY s.base_offset DESC LIMIT 1;
        IF NOT FOUND THEN
            v_lo := v_mid + 1;  -- below the oldest segment retention kept
        ELSIF v_at < p_instant THEN
            v_lo := greatest(v_last, v_mid) + 1;
        ELSE
            v_hi := greatest(v_base, v_lo);
        END IF;
    END LOOP;
    RETURN v_lo - 1;
END $$;

-- When the message at p_offset was written: the created_at of the segment holding it (the
-- last one starting at or before it, found through the primary key); null when retention
-- removed it. A function, not a lateral join, so that a statement over the view reads it
-- per row: on Citus the view's rows are an intermediate result, and a lateral join of a
-- distributed table to one is refused, while this is one statement on one shard.
CREATE OR REPLACE FUNCTION queen.written_at(p_partition bigint, p_offset bigint)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT s.created_at FROM queen.log_segments s
             WHERE s.partition_id = p_partition AND s.base_offset <= p_offset
             ORDER BY s.base_offset DESC LIMIT 1);
END $$;

-- One row per (group, partition of a queue the group reads): see the top of this file.
-- The seed is computed once per row in a subquery of its own (OFFSET 0 keeps the planner
-- from inlining it, which would compute it once per reference); a subquery without a FROM
-- there would be one Citus cannot plan.
CREATE OR REPLACE VIEW queen.group_positions AS
SELECT y.consumer_group, y.queue_id, y.partition_id, y.partition, y.last_offset, y.log_start,
       y.has_cursor, y.committed,
       greatest(y.last_offset - greatest(y.committed, y.log_start - 1), 0) AS offset_lag,
       y.batch_end, y.worker_id, y.lease_expires_at, y.retry_count, y.total_consumed,
       y.last_consumed_at, y.evicted
  FROM (SELECT z.consumer_group, z.queue_id, z.partition_id, z.partition, z.last_offset,
               z.log_start, z.has_cursor,
               coalesce(z.cursor_at, CASE
                   WHEN z.mode IN ('new', 'timestamp') AND z.subscription_from IS NOT NULL
                       THEN queen.offset_before(z.partition_id, z.log_start, z.last_offset,
                                                z.last_write_at, z.subscription_from)
                   ELSE z.log_start - 1 END) AS committed,
               z.batch_end, z.worker_id, z.lease_expires_at, z.retry_count,
               z.total_consumed, z.last_consumed_at, z.evicted
          -- The seed is taken over the rows below, not inside them: on Citus those rows
          -- are computed on the shards, where queen.offset_before's read of log_segments
          -- would be a distributed query nested in a shard's query (refused, XX000); here
          -- it runs where the statement was sent, as queen.written_at does.
          FROM (SELECT r.consumer_group, p.queue_id, p.id AS partition_id,
                       p.name AS partition, p.last_offset, p.log_start, p.last_write_at,
                       r.mode, r.subscription_from,
                       c.partition_id IS NOT NULL AS has_cursor,
                       c.committed AS cursor_at,
                       c.batch_end, c.worker_id, c.lease_expires_at,
                       coalesce(c.retry_count, 0) AS retry_count,
                       coalesce(c.total_consumed, 0) AS total_consumed,
                       c.last_consumed_at,
                       coalesce(c.evicted, 0) AS evicted
                  FROM (SELECT s.queue_id, s.consumer_group, s.mode, s.subscription_from
                          FROM queen.consumer_subscriptions s
                        UNION ALL
                        SELECT DISTINCT x.queue_id, x.consumer_group, NULL::text,
                               NULL::timestamptz
                          FROM (SELECT xp.queue_id, xc.consumer_group
                                  FROM queen.log_consumers xc
                                  JOIN queen.log_partitions xp
                                    ON xp.id = xc.partition_id) x
                         WHERE NOT EXISTS (SELECT 1 FROM queen.consumer_subscriptions xs
                                            WHERE xs.queue_id = x.queue_id
                                              AND xs.consumer_group = x.consumer_group)) r
                  JOIN queen.log_partitions p ON p.queue_id = r.queue_id
                  LEFT JOIN queen.log_consumers c
                    ON c.partition_id = p.id AND c.consumer_group = r.consumer_group
                OFFSET 0) z
        OFFSET 0) y;
