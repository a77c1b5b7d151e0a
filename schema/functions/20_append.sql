-- The write path: a flush is one statement, addressed by names.
--
-- queen.append writes the segments of several partitions in one statement, hence one
-- transaction and one WAL flush (docs/architecture/request-path.md, the write path), and resolves each
-- (queue, partition) by name inside it, creating both when missing: a flush never needs a
-- round trip (or a cache) to learn partition ids first, and a queue deleted meanwhile is
-- simply created again.
--
-- It learns whether each partition's segments were sealed, and writes them only when that
-- matches the queue's encryptionEnabled as it stands under the partition lock: a configure
-- that committed before never sees plain text written to its encrypted queue (nor a sealed
-- segment in a plain queue written by a broker that guessed wrong).
--
-- maxSize (wire-protocol §4.9): for a queue whose maxSize is above 0, a flush that would
-- take the queue's unconsumed messages past it writes nothing and raises SQLSTATE QN011 with
-- Queen's "would exceed max capacity" text; the broker answers the flush's items `failed`
-- with that text (core/errors.py CapacityExceeded). Queues with maxSize 0 (the default) pay
-- one integer read from the options they already read.
--
-- The function runs its statements with generic plans (planned once per connection) and
-- without sequential scans: re-planning them at each call, PL/pgSQL's default while their
-- parameters vary, cost more than running them, and a generic plan's guesses about array
-- arguments must never turn into a scan of a table that is small in live rows but large in
-- dead versions (partitions are updated all the time).

-- Append segments to partitions, or report duplicates and write nothing for that partition.
--   p_tenants, p_queues, p_partitions, p_namespaces, p_tasks   one entry per partition, in
--       the order to lock them (callers sort by name, so concurrent flushes cannot
--       deadlock); a queue is its tenant's (migration 140)
--   p_options     the complete default options of a queue this creates
--   p_segments    how many segments each partition gets (consecutive in p_blobs)
--   p_frames      frames of each segment
--   p_blobs       each segment's zstd blob of storage frames
--   p_txids       each frame's transactionId, flat, in frame order
--   p_repeats     per partition: whether its transactionIds repeat within this flush
--   p_encrypted   per partition: whether its segments are sealed (core/engine/encryption.py)
-- One row per partition, in the given order: its ids, and either the first offset and the
-- append time of what was written (offsets follow frame order across its segments), or
-- the frames (1-based positions within the partition) that are duplicates, with the offset
-- of the stored message each repeats (null: it repeats an earlier frame of this flush).
-- Duplicates are checked only when the queue's dedupWindowSeconds is above 0. Segments
-- sealed or not against the queue's encryptionEnabled (read under the partition lock) are
-- refused: nothing written for that partition, `encrypted` says what the queue wants.
-- Raises QN011 (maxSize, above) and QN002 (a partition that keeps disappearing).
CREATE OR REPLACE FUNCTION queen.append(
    p_tenants text[], p_queues text[], p_partitions text[], p_namespaces text[], p_tasks text[],
    p_options jsonb, p_segments integer[], p_frames integer[], p_blobs bytea[],
    p_txids text[], p_repeats boolean[], p_encrypted boolean[])
RETURNS TABLE (queue_id bigint, partition_id bigint, base_offset bigint,
               created_at timestamptz, dup_positions integer[], dup_offsets bigint[],
               encrypted boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    v_seg     integer := 1;   -- first segment of the current partition in p_blobs
    v_frame   integer := 1;   -- its first frame in p_txids
    v_frames  integer;
    v_keys    uuid[];
    v_next    bigint;
    v_now     timestamptz;
    v_size    bigint;
    l         record;
BEGIN
    FOR i IN 1 .. cardinality(p_queues) LOOP
        v_frames := 0;
        FOR s IN v_seg .. v_seg + p_segments[i] - 1 LOOP
            v_frames := v_frames + p_frames[s];
        END LOOP;
        -- The partition, locked; created (with its queue) when missing. A partition deleted
        -- with its queue between the lookup and the lock is not found by the lock: the loop
        -- creates it again.
        FOR attempt IN 1 .. 10 LOOP
            SELECT p.queue_id, p.id AS partition_id, p.last_offset, p.last_write_at,
                   (q.options ->> 'dedupWindowSeconds')::integer AS dedup_window,
                   coalesce((q.options ->> 'encryptionEnabled')::boolean, false)
                       AS encryption_enabled,
                   coalesce((q.options ->> 'maxSize')::bigint, 0) AS max_size
              INTO l
              FROM queen.queues q JOIN queen.log_partitions p ON p.queue_id = q.id
             WHERE q.tenant = p_tenants[i] AND q.name = p_queues[i]
               AND p.name = p_partitions[i]
               FOR UPDATE OF p;
            EXIT WHEN l.partition_id IS NOT NULL;
            INSERT INTO queen.queues (tenant, name, namespace, task, options)
            VALUES (p_tenants[i], p_queues[i], p_namespaces[i], p_tasks[i], p_options)
            ON CONFLICT ON CONSTRAINT queues_tenant_name_key DO NOTHING;
            INSERT INTO queen.log_partitions (queue_id, name)
            SELECT q.id, p_partitions[i] FROM queen.queues q
             WHERE q.tenant = p_tenants[i] AND q.name = p_queues[i]
            ON CONFLICT ON CONSTRAINT log_partitions_queue_id_name_key DO NOTHING;
        END LOOP;
        IF l.partition_id IS NULL THEN
            RAISE EXCEPTION 'partition % of queue % keeps disappearing', p_partitions[i],
                p_queues[i] USING ERRCODE = 'QN002';
        END IF;
        queue_id := l.queue_id;
        partition_id := l.partition_id;
        -- Read the clock after the lock: a writer that waited for it stamps a later time;
        -- never below the previous stamp, so created_at is monotone even if the clock steps.
        v_now := greatest(clock_timestamp(), l.last_write_at);
        v_keys := ARRAY(SELECT queen.txn_key(t)
                          FROM unnest(p_txids[v_frame : v_frame + v_frames - 1]) t);
        base_offset := NULL;
        created_at := NULL;
        dup_positions := NULL;
        dup_offsets := NULL;
        encrypted := l.encryption_enabled;
        IF encrypted IS DISTINCT FROM p_encrypted[i] THEN
            -- Built for the other setting (configure changed it, or the caller guessed):
            -- nothing written; the caller builds the segments again and retries.
            NULL;
        ELSIF l.dedup_window > 0 THEN
            -- Stored duplicates, and later repeats of a transactionId within this flush
            -- (looked for only when the caller saw some).
            SELECT array_agg(d.pos ORDER BY d.pos), array_agg(d.hit ORDER BY d.pos)
              INTO dup_positions, dup_offsets
              FROM (SELECT k.pos, hit.msg_offset AS hit,
                           p_repeats[i] AND min(k.pos) OVER (PARTITION BY k.key) < k.pos
                               AS repeat
                      FROM unnest(v_keys) WITH ORDINALITY AS k(key, pos)
                      LEFT JOIN LATERAL (
                            SELECT x.msg_offset FROM queen.log_txn_index x
                             WHERE x.partition_id = l.partition_id AND x.txn_key = k.key
                               AND x.created_at > v_now - make_interval(secs => l.dedup_window)
                             ORDER BY x.msg_offset LIMIT 1) hit ON true) d
             WHERE d.hit IS NOT NULL OR d.repeat;
        END IF;
        IF dup_positions IS NULL AND encrypted = p_encrypted[i] AND l.max_size > 0 THEN
            -- maxSize: the queue's unconsumed messages (per partition, those past its
            -- slowest cursor, or every retained one when nobody reads it) plus this
            -- flush's may not exceed it. Read under this partition's lock only: flushes
            -- to other partitions of the queue may each pass at the same time.
            SELECT coalesce(sum(p.last_offset
                                - greatest(coalesce(c.low, -1), p.log_start - 1)), 0)
              INTO v_size
              FROM queen.log_partitions p
              LEFT JOIN LATERAL (SELECT min(x.committed) AS low FROM queen.log_consumers x
                                  WHERE x.partition_id = p.id) c ON true
             WHERE p.queue_id = l.queue_id;
            IF v_size + v_frames > l.max_size THEN
                RAISE EXCEPTION 'Queue ''%'' would exceed max capacity (%)', p_queues[i],
                    l.max_size USING ERRCODE = 'QN011';
            END IF;
        END IF;
        IF dup_positions IS NULL AND encrypted = p_encrypted[i] THEN
            base_offset := l.last_offset + 1;
            created_at := v_now;
            v_next := base_offset;
            FOR s IN v_seg .. v_seg + p_segments[i] - 1 LOOP
                INSERT INTO queen.log_segments
                    (partition_id, base_offset, last_offset, message_count, created_at, blob)
                VALUES (l.partition_id, v_next, v_next + p_frames[s] - 1, p_frames[s], v_now,
                        p_blobs[s]);
                v_next := v_next + p_frames[s];
            END LOOP;
            INSERT INTO queen.log_txn_index (partition_id, msg_offset, created_at, txn_key)
            SELECT l.partition_id, l.last_offset + k.pos, v_now, k.key
              FROM unnest(v_keys) WITH ORDINALITY AS k(key, pos);
            UPDATE queen.log_partitions
               SET last_offset = l.last_offset + v_frames, last_write_at = v_now
             WHERE id = l.partition_id;
        END IF;
        RETURN NEXT;
        v_seg := v_seg + p_segments[i];
        v_frame := v_frame + v_frames;
    END LOOP;
END $$;
