-- The write path: a flush is one statement.
--
-- queen.append_partitions writes the segments of several partitions in one statement, hence
-- one transaction and one WAL flush (docs/architecture/request-path.md, the write path). It
-- takes each partition by name with the id the caller remembers for it (core/engine/
-- directory.py): a known id is checked against the names and used; an unknown one (0), or
-- one that is no longer that partition's (its queue deleted and made again), is looked up
-- by name inside the statement, creating the queue and the partition when missing
-- (queen.partition_ids). So a flush is one statement whether or not its partitions exist.
-- On Citus the broker learns ids ahead of a push and groups a flush's partitions by the shard
-- they live on: the call then runs on that shard's node and every statement in it reads and
-- writes that node's rows only (docs/deploying/citus.md). Every statement below that reads
-- or writes a partition's rows names one partition id; none joins a list of partitions with
-- those tables. queen.append takes names only (a stream cycle's sink pushes,
-- schema/functions/50_streams.sql).
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

-- The ids of partitions named by (tenant, queue, name), created with their queue when missing.
--   p_tenants, p_queues, p_partitions, p_namespaces, p_tasks   one entry per partition, in
--       the order to create them (callers sort by name, so concurrent creations cannot
--       deadlock); a queue is its tenant's (migration 140)
--   p_options     the complete default options of a queue this creates
-- One row per partition, in the given order. A partition lives in two rows: its directory
-- entry (queen.partition_directory: looked up by name) and its head (queen.log_partitions:
-- locked and moved by every append); both are written here, and only here.
-- Raises QN002 (a queue that keeps disappearing while its partition is created).
CREATE OR REPLACE FUNCTION queen.partition_ids(
    p_tenants text[], p_queues text[], p_partitions text[], p_namespaces text[],
    p_tasks text[], p_options jsonb)
RETURNS TABLE (queue_id bigint, partition_id bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    v_qid       bigint;
    v_pid       bigint;
    v_tenant    text;
    v_queue     text;
    v_name      text;
    v_namespace text;
    v_task      text;
BEGIN
    FOR i IN 1 .. cardinality(p_queues) LOOP
        v_pid := NULL;
        v_tenant := p_tenants[i];  -- plain variables (see queen.append_partitions)
        v_queue := p_queues[i];
        v_name := p_partitions[i];
        FOR attempt IN 1 .. 10 LOOP
            SELECT d.queue_id, d.partition_id INTO v_qid, v_pid
              FROM queen.queues q JOIN queen.partition_directory d ON d.queue_id = q.id
             WHERE q.tenant = v_tenant AND q.name = v_queue AND d.name = v_name;
            EXIT WHEN v_pid IS NOT NULL;
            v_namespace := p_namespaces[i];
            v_task := p_tasks[i];
            INSERT INTO queen.queues (tenant, name, namespace, task, options)
            VALUES (v_tenant, v_queue, v_namespace, v_task, p_options)
            ON CONFLICT ON CONSTRAINT queues_tenant_name_key DO NOTHING;
            SELECT q.id INTO v_qid FROM queen.queues q
             WHERE q.tenant = v_tenant AND q.name = v_queue;
            CONTINUE WHEN v_qid IS NULL;  -- deleted since: create it again
            v_pid := nextval('queen.log_partitions_id_seq');
            -- DO NOTHING waits for a concurrent creation of the same name, then leaves it
            -- theirs: the next round reads its id.
            INSERT INTO queen.partition_directory (queue_id, name, partition_id)
            VALUES (v_qid, v_name, v_pid)
            ON CONFLICT ON CONSTRAINT partition_directory_pkey DO NOTHING;
            IF FOUND THEN
                INSERT INTO queen.log_partitions (id, queue_id, name)
                VALUES (v_pid, v_qid, v_name);
                EXIT;
            END IF;
            v_pid := NULL;
        END LOOP;
        IF v_pid IS NULL THEN
            RAISE EXCEPTION 'partition % of queue % keeps disappearing', p_partitions[i],
                p_queues[i] USING ERRCODE = 'QN002';
        END IF;
        queue_id := v_qid;
        partition_id := v_pid;
        RETURN NEXT;
    END LOOP;
END $$;

-- The content size the header of a blob's first zstd frame declares (RFC 8878, 3.1.1.1),
-- or null: not a zstd frame, or one that does not say. A segment is one such frame
-- (core/segments.py writes the size; a client-built one must declare it, §7.2), sometimes
-- followed by a skippable frame of Kafka record metadata, which is not counted. Read from
-- the header's first bytes, so the append learns its segments' uncompressed size
-- (log_segments.raw_bytes) without decompressing anything.
CREATE OR REPLACE FUNCTION queen.zstd_content_size(p_blob bytea)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT
AS $$
DECLARE
    v_fhd  integer;
    v_at   integer;
    v_len  integer;
    v_size bigint := 0;
BEGIN
    IF octet_length(p_blob) < 6 OR substring(p_blob FROM 1 FOR 4) <> '\x28b52ffd'::bytea THEN
        RETURN NULL;
    END IF;
    v_fhd := get_byte(p_blob, 4);  -- the frame header descriptor
    -- The window descriptor (absent in a single-segment frame), then the dictionary id.
    v_at := 5 + CASE WHEN v_fhd & 32 = 0 THEN 1 ELSE 0 END
              + (ARRAY[0, 1, 2, 4])[(v_fhd & 3) + 1];
    v_len := (ARRAY[CASE WHEN v_fhd & 32 = 0 THEN 0 ELSE 1 END, 2, 4, 8])[(v_fhd >> 6) + 1];
    IF v_len = 0 OR v_at + v_len > octet_length(p_blob)
       OR (v_len = 8 AND get_byte(p_blob, v_at + 7) >= 128) THEN
        RETURN NULL;
    END IF;
    FOR i IN REVERSE v_len - 1 .. 0 LOOP  -- little-endian
        v_size := v_size * 256 + get_byte(p_blob, v_at + i);
    END LOOP;
    RETURN v_size + CASE WHEN v_len = 2 THEN 256 ELSE 0 END;
END $$;

-- Append segments to partitions, or report duplicates and write nothing for that partition.
--   p_route       on Citus, a number of the shard every partition here lives on: Citus runs
--                 the call on that shard's node (core/storage/shards.py); ignored otherwise
--   p_tenants, p_queues, p_partitions, p_namespaces, p_tasks   one entry per partition, in
--       the order to lock them (callers sort by name, so concurrent flushes cannot
--       deadlock); a queue is its tenant's (migration 140)
--   p_partition_ids   the id the caller remembers for each partition, 0 when none
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
CREATE OR REPLACE FUNCTION queen.append_partitions(
    p_route bigint, p_tenants text[], p_partition_ids bigint[], p_queues text[],
    p_partitions text[], p_namespaces text[], p_tasks text[], p_options jsonb,
    p_segments integer[], p_frames integer[], p_blobs bytea[], p_txids text[], p_repeats boolean[],
    p_encrypted boolean[])
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
    v_pid     bigint;
    v_tenant  text;
    v_queue   text;
    v_name    text;
    v_keys    uuid[];
    v_next    bigint;
    v_now     timestamptz;
    v_size    bigint;
    v_known   boolean;
    v_count   integer;
    v_repeats boolean;
    v_blob    bytea;
    l         record;
    o         record;
BEGIN
    FOR i IN 1 .. cardinality(p_partition_ids) LOOP
        v_frames := 0;
        FOR s IN v_seg .. v_seg + p_segments[i] - 1 LOOP
            v_frames := v_frames + p_frames[s];
        END LOOP;
        -- Plain variables, no array elements, in statements on distributed tables: Citus
        -- 13.2 crashes on an element of an array argument there (local execution).
        v_pid := coalesce(p_partition_ids[i], 0);
        v_tenant := p_tenants[i];
        v_queue := p_queues[i];
        v_name := p_partitions[i];
        v_repeats := p_repeats[i];
        -- The partition's head, locked; then its queue's options as they stand now. An id
        -- that is not (or no longer) this partition's is replaced by the one its names have
        -- now; a partition deleted with its queue meanwhile is created again.
        v_known := false;
        FOR attempt IN 1 .. 10 LOOP
            IF v_pid = 0 THEN
                SELECT x.partition_id INTO v_pid
                  FROM queen.partition_ids(ARRAY[v_tenant], ARRAY[v_queue], ARRAY[v_name],
                                           ARRAY[p_namespaces[i]], ARRAY[p_tasks[i]],
                                           p_options) x;
            END IF;
            -- On Citus, before the head is read: the offsets it hands out are written on
            -- the copy it was read from (90_distribution.sql, queen.hold_placement).
            PERFORM queen.hold_placement(v_pid);
            SELECT p.queue_id, p.name, p.last_offset, p.last_write_at INTO l
              FROM queen.log_partitions p WHERE p.id = v_pid FOR UPDATE;
            IF FOUND AND l.name = v_name THEN
                SELECT q.name, (q.options ->> 'dedupWindowSeconds')::integer AS dedup_window,
                       coalesce((q.options ->> 'encryptionEnabled')::boolean, false)
                           AS encryption_enabled,
                       coalesce((q.options ->> 'maxSize')::bigint, 0) AS max_size
                  INTO o
                  FROM queen.queues q
                 WHERE q.id = l.queue_id AND q.tenant = v_tenant AND q.name = v_queue;
                v_known := FOUND;
            END IF;
            EXIT WHEN v_known;
            v_pid := 0;
        END LOOP;
        IF NOT v_known THEN
            RAISE EXCEPTION 'partition % of queue % keeps disappearing', v_name, v_queue
                USING ERRCODE = 'QN002';
        END IF;
        queue_id := l.queue_id;
        partition_id := v_pid;
        base_offset := NULL;
        created_at := NULL;
        dup_positions := NULL;
        dup_offsets := NULL;
        -- Read the clock after the lock: a writer that waited for it stamps a later time;
        -- never below the previous stamp, so created_at is monotone even if the clock steps.
        v_now := greatest(clock_timestamp(), l.last_write_at);
        v_keys := ARRAY(SELECT queen.txn_key(t)
                          FROM unnest(p_txids[v_frame : v_frame + v_frames - 1]) t);
        encrypted := o.encryption_enabled;
        IF encrypted IS DISTINCT FROM p_encrypted[i] THEN
            -- Built for the other setting (configure changed it, or the caller guessed):
            -- nothing written; the caller builds the segments again and retries.
            NULL;
        ELSIF o.dedup_window > 0 AND (v_repeats OR EXISTS (
                SELECT 1 FROM queen.log_txn_index x
                 WHERE x.partition_id = v_pid AND x.txn_key = ANY (v_keys)
                   AND x.created_at > v_now - make_interval(secs => o.dedup_window))) THEN
            -- Stored duplicates, and later repeats of a transactionId within this flush
            -- (looked for only when the caller saw some). Most flushes have neither: one
            -- probe of the index for all their keys at once says so, and only a flush with
            -- a hit pays for the per-key lookups below, which say which frame repeats
            -- which offset (a flush of 100 spent about a tenth of its append's CPU on them).
            SELECT array_agg(d.pos ORDER BY d.pos), array_agg(d.hit ORDER BY d.pos)
              INTO dup_positions, dup_offsets
              FROM (SELECT k.pos, hit.msg_offset AS hit,
                           v_repeats AND min(k.pos) OVER (PARTITION BY k.key) < k.pos
                               AS repeat
                      FROM unnest(v_keys) WITH ORDINALITY AS k(key, pos)
                      LEFT JOIN LATERAL (
                            SELECT x.msg_offset FROM queen.log_txn_index x
                             WHERE x.partition_id = v_pid AND x.txn_key = k.key
                               AND x.created_at > v_now - make_interval(secs => o.dedup_window)
                             ORDER BY x.msg_offset LIMIT 1) hit ON true) d
             WHERE d.hit IS NOT NULL OR d.repeat;
        END IF;
        IF dup_positions IS NULL AND encrypted = p_encrypted[i] AND o.max_size > 0 THEN
            -- maxSize: the queue's unconsumed messages (per partition, those past its
            -- slowest cursor, or every retained one when nobody reads it) plus this
            -- flush's may not exceed it. Read under this partition's lock only: flushes
            -- to other partitions of the queue may each pass at the same time. (It reads
            -- every partition of the queue: on Citus, every shard.)
            SELECT coalesce(sum(p.last_offset
                                - greatest(coalesce(c.low, -1), p.log_start - 1)), 0)
              INTO v_size
              FROM queen.log_partitions p
              LEFT JOIN LATERAL (SELECT min(x.committed) AS low FROM queen.log_consumers x
                                  WHERE x.partition_id = p.id) c ON true
             WHERE p.queue_id = l.queue_id;
            IF v_size + v_frames > o.max_size THEN
                RAISE EXCEPTION 'Queue ''%'' would exceed max capacity (%)', o.name,
                    o.max_size USING ERRCODE = 'QN011';
            END IF;
        END IF;
        IF dup_positions IS NULL AND encrypted = p_encrypted[i] THEN
            base_offset := l.last_offset + 1;
            created_at := v_now;
            v_next := base_offset;
            FOR s IN v_seg .. v_seg + p_segments[i] - 1 LOOP
                v_count := p_frames[s];
                v_blob := p_blobs[s];
                -- Its frames' size, for a pop's byte budget (30_pop.sql); a sealed blob's
                -- header is ciphertext, so its stored size stands for it.
                INSERT INTO queen.log_segments
                    (partition_id, base_offset, last_offset, message_count, created_at, blob,
                     raw_bytes)
                VALUES (v_pid, v_next, v_next + v_count - 1, v_count, v_now, v_blob,
                        CASE WHEN NOT encrypted THEN queen.zstd_content_size(v_blob) END);
                v_next := v_next + v_count;
            END LOOP;
            INSERT INTO queen.log_txn_index (partition_id, msg_offset, created_at, txn_key)
            SELECT v_pid, l.last_offset + k.pos, v_now, k.key
              FROM unnest(v_keys) WITH ORDINALITY AS k(key, pos);
            UPDATE queen.log_partitions
               SET last_offset = l.last_offset + v_frames, last_write_at = v_now
             WHERE id = v_pid;
        END IF;
        RETURN NEXT;
        v_seg := v_seg + p_segments[i];
        v_frame := v_frame + v_frames;
    END LOOP;
END $$;

-- queen.append_partitions by names alone (the arguments of the write path before ids):
-- every partition is looked up (created) by name inside. Same answer.
CREATE OR REPLACE FUNCTION queen.append(
    p_tenants text[], p_queues text[], p_partitions text[], p_namespaces text[], p_tasks text[],
    p_options jsonb, p_segments integer[], p_frames integer[], p_blobs bytea[],
    p_txids text[], p_repeats boolean[], p_encrypted boolean[])
RETURNS TABLE (queue_id bigint, partition_id bigint, base_offset bigint,
               created_at timestamptz, dup_positions integer[], dup_offsets bigint[],
               encrypted boolean)
LANGUAGE sql
AS $$
    SELECT * FROM queen.append_partitions(
        NULL, p_tenants, array_fill(0::bigint, ARRAY[cardinality(p_queues)]), p_queues,
        p_partitions, p_namespaces, p_tasks, p_options, p_segments, p_frames, p_blobs, p_txids,
        p_repeats, p_encrypted)
$$;
