-- Ephemeral queues (wire-protocol-extensions §19; tables in migration 090).
--
-- Every call that changes a queue first locks its `eph_queue` row (FOR UPDATE): the calls of
-- one queue run one after another, which keeps bounds all-or-nothing, cursors and leases
-- consistent, and means one lock order (one queue per call) so they cannot deadlock.
-- Sequence numbers come from one UNLOGGED sequence, so a seq is never reused within an
-- epoch, also after a queue is collected and created again; a crash resets the sequence and
-- the epoch together (queen.eph_epoch_now mints the next epoch).
--
-- The hot verbs run with generic plans and nested loops over indexes only: re-planning at
-- each call cost more than running, and a hash or merge join would walk every dead version
-- of these busy tables.

-- The current epoch; minted when the row is missing (first use, after a crash emptied it).
CREATE OR REPLACE FUNCTION queen.eph_epoch_now() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v bigint;
BEGIN
    SELECT epoch INTO v FROM queen.eph_epoch;
    IF FOUND THEN
        RETURN v;
    END IF;
    -- The contents and the sequence were lost with the row: start a new epoch. The logged
    -- counter serialises concurrent minters; the loser's number is simply never used.
    UPDATE queen.eph_epochs_minted SET last = last + 1 RETURNING last INTO v;
    INSERT INTO queen.eph_epoch (id, epoch) VALUES (true, v) ON CONFLICT (id) DO NOTHING;
    SELECT epoch INTO v FROM queen.eph_epoch;
    RETURN v;
END $$;

-- The options in force of a queue: its declaration, else the defaults of §19.2.
CREATE OR REPLACE FUNCTION queen.eph_options(p_queue text,
    OUT max_bytes bigint, OUT max_length integer, OUT policy text, OUT ttl_seconds integer,
    OUT lease_seconds integer, OUT retry_limit integer, OUT window_ms integer,
    OUT window_count integer)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT d.max_bytes, d.max_length, d.policy, d.ttl_seconds, d.lease_seconds,
           d.retry_limit, d.window_ms, d.window_count
      INTO max_bytes, max_length, policy, ttl_seconds, lease_seconds, retry_limit,
           window_ms, window_count
      FROM queen.eph_declared d WHERE d.queue = p_queue;
    IF NOT FOUND THEN
        max_bytes := 16777216; max_length := 10000; policy := 'reject'; ttl_seconds := 0;
        lease_seconds := 30; retry_limit := 5; window_ms := 0; window_count := 0;
    END IF;
END $$;

-- Lock a queue's row, creating it when `p_create`; false when it does not exist.
CREATE OR REPLACE FUNCTION queen.eph_lock(p_queue text, p_create boolean) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    LOOP
        PERFORM 1 FROM queen.eph_queue WHERE queue = p_queue FOR UPDATE;
        IF FOUND THEN
            RETURN true;
        END IF;
        IF NOT p_create THEN
            -- A declared queue whose live row was lost (crash) or not yet made.
            IF NOT EXISTS (SELECT 1 FROM queen.eph_declared WHERE queue = p_queue) THEN
                RETURN false;
            END IF;
        END IF;
        INSERT INTO queen.eph_queue (queue) VALUES (p_queue) ON CONFLICT (queue) DO NOTHING;
    END LOOP;
END $$;

-- Free the messages of these rings that every known group has passed and no lease holds;
-- subtract them from the queue's gauges. A ring no group ever popped keeps everything.
CREATE OR REPLACE FUNCTION queen.eph_free(p_queue text, p_partitions text[]) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off AS $$
DECLARE
    n integer := 0;
    b bigint := 0;
    dn integer;
    db bigint;
    f record;
BEGIN
    -- Per ring, the lowest cursor of the known groups (none known: keep everything).
    FOR f IN
        SELECT p.partition, min(coalesce(c.last_seq, 0)) AS upto
          FROM (SELECT DISTINCT unnest(p_partitions) AS partition) p
          CROSS JOIN LATERAL (
              SELECT c.last_seq FROM queen.eph_group g
                LEFT JOIN queen.eph_cursor c
                       ON c.queue = g.queue AND c.partition = p.partition AND c.grp = g.grp
               WHERE g.queue = p_queue) c
         GROUP BY p.partition
    LOOP
        WITH freed AS (
            DELETE FROM queen.eph_message m
             WHERE m.queue = p_queue AND m.partition = f.partition AND m.seq <= f.upto
               AND NOT EXISTS (SELECT 1 FROM queen.eph_lease l
                                WHERE l.queue = p_queue AND l.seq = m.seq)
            RETURNING m.bytes)
        SELECT count(*), coalesce(sum(bytes), 0) INTO dn, db FROM freed;
        n := n + dn;
        b := b + db;
    END LOOP;
    IF n > 0 THEN
        UPDATE queen.eph_queue SET depth = depth - n, bytes = bytes - b WHERE queue = p_queue;
    END IF;
END $$;

-- Drop the messages older than ttl from the heads of a locked queue, consumed or not, with
-- their leases (drops.ttl).
CREATE OR REPLACE FUNCTION queen.eph_ttl(p_queue text, p_ttl integer) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off AS $$
DECLARE
    n integer;
    b bigint;
BEGIN
    WITH gone AS (
        DELETE FROM queen.eph_message
         WHERE queue = p_queue AND created_at < now() - make_interval(secs => p_ttl)
        RETURNING partition, seq, bytes),
    leases AS (
        DELETE FROM queen.eph_lease l
         WHERE l.queue = p_queue AND l.seq IN (SELECT gone.seq FROM gone))
    SELECT count(*), coalesce(sum(bytes), 0) INTO n, b FROM gone;
    IF n > 0 THEN
        UPDATE queen.eph_queue SET depth = depth - n, bytes = bytes - b,
               drops_ttl = drops_ttl + n WHERE queue = p_queue;
    END IF;
END $$;

-- Passed leases of a locked queue (of one group, or of every group when p_group is NULL):
-- those that spent the retry limit are dropped (drops.retry) and their messages freed.
CREATE OR REPLACE FUNCTION queen.eph_spent(p_queue text, p_group text, p_retry_limit integer)
RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off AS $$
DECLARE
    n integer;
    parts text[];
BEGIN
    WITH spent AS (
        DELETE FROM queen.eph_lease
         WHERE queue = p_queue AND (p_group IS NULL OR grp = p_group)
           AND expires_at <= now() AND attempts >= p_retry_limit
        RETURNING partition)
    SELECT count(*), array_agg(DISTINCT partition) INTO n, parts FROM spent;
    IF n > 0 THEN
        UPDATE queen.eph_queue SET drops_retry = drops_retry + n WHERE queue = p_queue;
        PERFORM queen.eph_free(p_queue, parts);
    END IF;
END $$;

-- The sweep's work on one locked queue: ttl, spent leases, and passed leases marked
-- (-infinity: "announced"); answers whether a lease passed since the last sweep.
CREATE OR REPLACE FUNCTION queen.eph_expire(p_queue text, p_ttl integer, p_retry_limit integer)
RETURNS boolean
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off AS $$
DECLARE
    n integer;
BEGIN
    IF p_ttl > 0 THEN
        PERFORM queen.eph_ttl(p_queue, p_ttl);
    END IF;
    PERFORM queen.eph_spent(p_queue, NULL, p_retry_limit);
    UPDATE queen.eph_lease SET expires_at = '-infinity'
     WHERE queue = p_queue AND expires_at <= now() AND expires_at > '-infinity';
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n > 0;
END $$;

-- Push (§19.3): all or nothing. Answers 'ok', 'full' (429 queue_full) or 'unavailable'
-- (the deployment-wide ceiling on held bytes, 503), and the count written. Notifies
-- `p_channel` with the queue name at commit when it wrote.
CREATE OR REPLACE FUNCTION queen.eph_push_into(p_queue text, p_partition text, p_payloads text[],
                                    p_cap bigint, p_max_bytes bigint, p_max_length integer,
                                    p_policy text, OUT status text, OUT pushed integer)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off AS $$
DECLARE
    n integer := coalesce(array_length(p_payloads, 1), 0);
    nb bigint;
    q record;
    evict_n integer := 0;
    evict_b bigint := 0;
    evict_upto bigint;
    held bigint;
BEGIN
    pushed := 0;
    SELECT coalesce(sum(octet_length(x)), 0) INTO nb FROM unnest(p_payloads) x;
    SELECT depth, bytes INTO q FROM queen.eph_queue WHERE queue = p_queue;
    IF q.depth + n > p_max_length OR q.bytes + nb > p_max_bytes THEN
        IF p_policy <> 'dropOldest' OR n > p_max_length OR nb > p_max_bytes THEN
            status := 'full';
            RETURN;
        END IF;
        -- The shortest head of the pushed ring whose eviction makes the push fit.
        SELECT w.seq, w.k, w.kb INTO evict_upto, evict_n, evict_b
          FROM (SELECT seq, count(*) OVER (ORDER BY seq) AS k,
                       sum(bytes) OVER (ORDER BY seq) AS kb
                  FROM queen.eph_message
                 WHERE queue = p_queue AND partition = p_partition) w
         WHERE q.depth - w.k + n <= p_max_length AND q.bytes - w.kb + nb <= p_max_bytes
         ORDER BY w.seq LIMIT 1;
        IF NOT FOUND THEN
            status := 'full';
            RETURN;
        END IF;
    END IF;
    SELECT coalesce(sum(bytes), 0) INTO held FROM queen.eph_queue;
    IF held - evict_b + nb > p_cap THEN
        status := 'unavailable';
        RETURN;
    END IF;
    IF evict_n > 0 THEN
        -- Groups whose cursor had not reached an evicted message skipped it.
        INSERT INTO queen.eph_cursor AS c (queue, partition, grp, last_seq, skipped)
        SELECT p_queue, p_partition, g.grp, 0,
               (SELECT count(*) FROM queen.eph_message m
                 WHERE m.queue = p_queue AND m.partition = p_partition AND m.seq <= evict_upto
                   AND m.seq > coalesce((SELECT c2.last_seq FROM queen.eph_cursor c2
                                          WHERE c2.queue = p_queue
                                            AND c2.partition = p_partition
                                            AND c2.grp = g.grp), 0))
          FROM queen.eph_group g WHERE g.queue = p_queue
        ON CONFLICT (queue, partition, grp) DO UPDATE SET skipped = c.skipped + excluded.skipped;
        DELETE FROM queen.eph_lease
         WHERE queue = p_queue AND seq IN (SELECT m.seq FROM queen.eph_message m
                                            WHERE m.queue = p_queue
                                              AND m.partition = p_partition
                                              AND m.seq <= evict_upto);
        DELETE FROM queen.eph_message
         WHERE queue = p_queue AND partition = p_partition AND seq <= evict_upto;
    END IF;
    IF n > 0 THEN
        WITH added AS (
            INSERT INTO queen.eph_message (queue, partition, seq, payload, bytes)
            SELECT p_queue, p_partition, nextval('queen.eph_seq'), x, octet_length(x)
              FROM unnest(p_payloads) WITH ORDINALITY AS t(x, i) ORDER BY i
            RETURNING seq)
        INSERT INTO queen.eph_partition AS p (queue, partition, last_seq)
        SELECT p_queue, p_partition, max(seq) FROM added
        ON CONFLICT (queue, partition) DO UPDATE SET last_seq = excluded.last_seq;
    ELSE
        INSERT INTO queen.eph_partition (queue, partition) VALUES (p_queue, p_partition)
            ON CONFLICT DO NOTHING;
    END IF;
    UPDATE queen.eph_queue
       SET depth = depth - evict_n + n, bytes = bytes - evict_b + nb,
           drops_bounds = drops_bounds + evict_n, touched_at = now()
     WHERE queue = p_queue;
    status := 'ok';
    pushed := n;
END $$;

-- Push (§19.3): the pushes of one queue that a worker gathered while its previous call was
-- running, in order, each all or nothing (p_counts[i] payloads of p_payloads for
-- p_partitions[i]); one lock and one commit for all of them. Notifies `p_channel` once
-- when any wrote.
CREATE OR REPLACE FUNCTION queen.eph_push(p_queue text, p_partitions text[], p_counts integer[],
                               p_payloads text[], p_cap bigint, p_channel text)
RETURNS TABLE (idx integer, status text, pushed integer)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off AS $$
#variable_conflict use_column
DECLARE
    o record;
    r record;
    i integer;
    first integer := 1;
    wrote boolean := false;
BEGIN
    PERFORM queen.eph_lock(p_queue, true);
    o := queen.eph_options(p_queue);
    -- Lease expiry cannot change whether a push fits (a leased message is held either way);
    -- ttl can. Spent leases are the pops' and the sweep's business.
    IF o.ttl_seconds > 0 THEN
        PERFORM queen.eph_ttl(p_queue, o.ttl_seconds);
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_counts, 1), 0) LOOP
        r := queen.eph_push_into(p_queue, p_partitions[i],
                                 p_payloads[first : first + p_counts[i] - 1], p_cap,
                                 o.max_bytes, o.max_length, o.policy);
        first := first + p_counts[i];
        wrote := wrote OR r.pushed > 0;
        idx := i;
        status := r.status;
        pushed := r.pushed;
        RETURN NEXT;
    END LOOP;
    IF wrote THEN
        PERFORM pg_notify(p_channel, p_queue);
    END IF;
END $$;

-- Pop (§19.4) once, without waiting: up to p_batch messages for the group, its
-- redeliveries first (in seq order), then from its cursor ring by ring in partition name
-- byte order. Leases what it delivers unless p_auto_ack. p_partition NULL: every existing
-- partition; named: created if needed. Creates the queue.
-- The answer keeps within a byte budget (QUEEN_POP_MAX_BYTES, as the log's pops): its
-- payloads' bytes and p_spent (what earlier calls of the same long poll gathered) stay
-- within p_max_bytes, except that an answer's first message goes out whatever its size. What
-- does not fit is chosen neither as redelivery nor past the cursor, so it is neither leased
-- nor freed, and the next pop gets it at once: the budget cuts the redeliveries and each
-- ring's run at a prefix, and no later ring is read once one was cut.
CREATE OR REPLACE FUNCTION queen.eph_pop(p_queue text, p_partition text, p_group text, p_batch integer,
                              p_auto_ack boolean, p_max_bytes bigint, p_spent bigint)
RETURNS TABLE (epoch bigint, partition text, seq bigint, attempts integer, payload text,
               bytes integer)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off AS $$
#variable_conflict use_column
DECLARE
    o record;
    v_epoch bigint := queen.eph_epoch_now();
    r_parts text[];
    r_seqs bigint[];
    r_attempts integer[];
    f_parts text[];
    f_seqs bigint[];
    touched text[];
    room integer;
    ring record;
    spent bigint := p_spent;  -- the answer's bytes so far, with the earlier calls'
    kept integer;
    seen integer;
    kept_bytes bigint;
BEGIN
    PERFORM queen.eph_lock(p_queue, true);
    o := queen.eph_options(p_queue);
    IF o.ttl_seconds > 0 THEN
        PERFORM queen.eph_ttl(p_queue, o.ttl_seconds);
    END IF;
    -- This group's passed leases that spent the retry limit go, not back to it.
    PERFORM queen.eph_spent(p_queue, p_group, o.retry_limit);
    IF p_partition IS NOT NULL THEN
        INSERT INTO queen.eph_partition (queue, partition) VALUES (p_queue, p_partition)
            ON CONFLICT DO NOTHING;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM queen.eph_group g WHERE g.queue = p_queue AND g.grp = p_group)
    THEN
        INSERT INTO queen.eph_group (queue, grp) VALUES (p_queue, p_group) ON CONFLICT DO NOTHING;
    END IF;
    -- Redeliveries: passed leases of this group, the prefix that fits the budget (`upto`:
    -- the bytes up to and with each one).
    SELECT array_agg(l.partition ORDER BY l.seq) FILTER (WHERE l.fits),
           array_agg(l.seq ORDER BY l.seq) FILTER (WHERE l.fits),
           array_agg(l.attempts + 1 ORDER BY l.seq) FILTER (WHERE l.fits),
           count(*) FILTER (WHERE l.fits), count(*),
           coalesce(sum(l.bytes) FILTER (WHERE l.fits), 0)
      INTO r_parts, r_seqs, r_attempts, kept, seen, kept_bytes
      FROM (SELECT l.*, (spent = 0 AND l.k = 1) OR spent + l.upto <= p_max_bytes AS fits
              FROM (SELECT l.partition, l.seq, l.attempts, m.bytes,
                           sum(m.bytes) OVER (ORDER BY l.seq) AS upto,
                           row_number() OVER (ORDER BY l.seq) AS k
                      FROM (SELECT l.partition, l.seq, l.attempts FROM queen.eph_lease l
                             WHERE l.queue = p_queue AND l.grp = p_group
                               AND l.expires_at <= now()
                               AND (p_partition IS NULL OR l.partition = p_partition)
                             ORDER BY l.seq LIMIT p_batch) l
                      CROSS JOIN LATERAL (
                          SELECT coalesce((SELECT m.bytes FROM queen.eph_message m
                                            WHERE m.queue = p_queue AND m.partition = l.partition
                                              AND m.seq = l.seq), 0) AS bytes) m) l) l;
    spent := spent + kept_bytes;
    -- Fresh messages past the cursor, ring by ring in name order until the batch is full
    -- (one ring at a time: asking every ring for a whole batch would read up to
    -- partitions x batch rows to keep batch of them), or the budget cut a run.
    f_parts := '{}';
    f_seqs := '{}';
    room := CASE WHEN kept < seen THEN 0 ELSE p_batch - kept END;
    FOR ring IN
        SELECT r.name, r.after FROM (
            SELECT p.partition AS name, p.last_seq,
                   coalesce((SELECT c.last_seq FROM queen.eph_cursor c
                              WHERE c.queue = p_queue AND c.partition = p.partition
                                AND c.grp = p_group), 0) AS after
              FROM queen.eph_partition p
             WHERE p.queue = p_queue AND (p_partition IS NULL OR p.partition = p_partition)) r
         WHERE r.last_seq > r.after
         ORDER BY r.name COLLATE "C"
    LOOP
        EXIT WHEN room <= 0;
        SELECT f_seqs || coalesce(array_agg(m.seq ORDER BY m.seq) FILTER (WHERE m.fits), '{}'),
               count(*) FILTER (WHERE m.fits), count(*),
               coalesce(sum(m.bytes) FILTER (WHERE m.fits), 0)
          INTO f_seqs, kept, seen, kept_bytes
          FROM (SELECT m.seq, m.bytes,
                       (spent = 0 AND m.k = 1) OR spent + m.upto <= p_max_bytes AS fits
                  FROM (SELECT m.seq, m.bytes, sum(m.bytes) OVER (ORDER BY m.seq) AS upto,
                               row_number() OVER (ORDER BY m.seq) AS k
                          FROM (SELECT m.seq, m.bytes FROM queen.eph_message m
                                 WHERE m.queue = p_queue AND m.partition = ring.name
                                   AND m.seq > ring.after
                                 ORDER BY m.seq LIMIT room) m) m) m;
        f_parts := f_parts || array_fill(ring.name, ARRAY[cardinality(f_seqs) - cardinality(f_parts)]);
        spent := spent + kept_bytes;
        room := CASE WHEN kept < seen THEN 0
                     ELSE p_batch - coalesce(array_length(r_seqs, 1), 0) - cardinality(f_seqs)
                END;
    END LOOP;
    IF cardinality(f_seqs) = 0 THEN
        f_seqs := NULL;
        f_parts := NULL;
    END IF;
    IF f_seqs IS NOT NULL THEN
        INSERT INTO queen.eph_cursor AS c (queue, partition, grp, last_seq)
        SELECT p_queue, t.p, p_group, max(t.s)
          FROM unnest(f_parts, f_seqs) AS t(p, s) GROUP BY t.p
        ON CONFLICT (queue, partition, grp) DO UPDATE SET last_seq = excluded.last_seq;
    END IF;
    IF p_auto_ack THEN
        IF r_seqs IS NOT NULL THEN
            DELETE FROM queen.eph_lease l
             WHERE l.queue = p_queue AND l.grp = p_group AND l.seq = ANY(r_seqs);
        END IF;
    ELSE
        IF r_seqs IS NOT NULL THEN
            UPDATE queen.eph_lease l
               SET attempts = l.attempts + 1,
                   expires_at = now() + make_interval(secs => o.lease_seconds)
             WHERE l.queue = p_queue AND l.grp = p_group AND l.seq = ANY(r_seqs);
        END IF;
        IF f_seqs IS NOT NULL THEN
            INSERT INTO queen.eph_lease (queue, partition, grp, seq, attempts, expires_at)
            SELECT p_queue, t.p, p_group, t.s, 1,
                   now() + make_interval(secs => o.lease_seconds)
              FROM unnest(f_parts, f_seqs) AS t(p, s);
        END IF;
    END IF;
    UPDATE queen.eph_queue SET touched_at = now() WHERE queue = p_queue;
    -- Read the payloads before the messages can be freed.
    RETURN QUERY
        SELECT v_epoch, t.p, t.s, t.a, m.payload, m.bytes
          FROM unnest(coalesce(r_parts, '{}') || coalesce(f_parts, '{}'),
                      coalesce(r_seqs, '{}') || coalesce(f_seqs, '{}'),
                      coalesce(r_attempts, '{}') || array_fill(1, ARRAY[coalesce(array_length(f_seqs, 1), 0)]))
               WITH ORDINALITY AS t(p, s, a, i)
          CROSS JOIN LATERAL (
              SELECT m.payload, m.bytes FROM queen.eph_message m
               WHERE m.queue = p_queue AND m.partition = t.p AND m.seq = t.s) m
         ORDER BY t.i;
    -- Leased messages stay held; only an autoAck pop can free what it delivered.
    touched := coalesce(r_parts, '{}') || coalesce(f_parts, '{}');
    IF p_auto_ack AND cardinality(touched) > 0 THEN
        PERFORM queen.eph_free(p_queue, touched);
    END IF;
END $$;

-- queen.eph_pop as brokers of the version before the byte budget call it: during a rolling
-- upgrade they keep popping, within the default budget (QUEEN_POP_MAX_BYTES, 64 MiB), until
-- they are replaced (docs/operating/upgrades.md).
CREATE OR REPLACE FUNCTION queen.eph_pop(p_queue text, p_partition text, p_group text, p_batch integer,
                              p_auto_ack boolean)
RETURNS TABLE (epoch bigint, partition text, seq bigint, attempts integer, payload text)
LANGUAGE sql
AS $$
    SELECT p.epoch, p.partition, p.seq, p.attempts, p.payload
      FROM queen.eph_pop(p_queue, p_partition, p_group, p_batch, p_auto_ack,
                         64 * 1024 * 1024, 0) p
$$;

-- Ack (§19.5), items in order. p_epochs[i] NULL: unparsable id. Statuses are normalised by
-- the caller to completed | failed | retry. Notifies `p_channel` when something became
-- redeliverable.
CREATE OR REPLACE FUNCTION queen.eph_ack(p_queue text, p_group text, p_epochs bigint[],
                              p_partitions text[], p_seqs bigint[], p_statuses text[],
                              p_channel text)
RETURNS TABLE (idx integer, outcome text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_bitmapscan = off AS $$
#variable_conflict use_column
DECLARE
    v_epoch bigint := queen.eph_epoch_now();
    o record;
    n_drops integer;
    n_redelivered integer;
    touched text[];
    v_i integer[];
    v_p text[];
    v_s bigint[];
    v_verdict text[];
BEGIN
    IF NOT queen.eph_lock(p_queue, false) THEN
        RETURN QUERY SELECT t.i::integer,
                            CASE WHEN t.e IS NOT NULL AND t.e <> v_epoch THEN 'stale'
                                 ELSE 'unknown' END
                       FROM unnest(p_epochs) WITH ORDINALITY AS t(e, i);
        RETURN;
    END IF;
    o := queen.eph_options(p_queue);
    -- Each item's verdict, decided before anything changes: the first item naming a live
    -- lease of this group settles it; a repeat in the same call finds it settled (unknown).
    SELECT array_agg(x.i ORDER BY x.i), array_agg(x.p ORDER BY x.i),
           array_agg(x.s ORDER BY x.i), array_agg(x.verdict ORDER BY x.i)
      INTO v_i, v_p, v_s, v_verdict
      FROM (
    SELECT t.i::integer AS i, t.p, t.s,
           CASE WHEN t.e IS NULL THEN 'unknown'
                WHEN t.e <> v_epoch THEN 'stale'
                WHEN l.seq IS NULL
                  OR t.i <> min(t.i) FILTER (WHERE t.e = v_epoch)
                                       OVER (PARTITION BY t.p, t.s) THEN 'unknown'
                WHEN t.st = 'completed' THEN 'acked'
                WHEN l.attempts >= o.retry_limit THEN 'dropped'
                ELSE 'redelivered' END AS verdict
      FROM unnest(p_epochs, p_partitions, p_seqs, p_statuses) WITH ORDINALITY
           AS t(e, p, s, st, i)
      LEFT JOIN LATERAL (
          SELECT l.seq, l.attempts FROM queen.eph_lease l
           WHERE t.e = v_epoch AND l.queue = p_queue AND l.grp = p_group AND l.seq = t.s
             AND l.partition = t.p AND l.expires_at > now()) l ON true) x;
    DELETE FROM queen.eph_lease l
     WHERE l.queue = p_queue AND l.grp = p_group
       AND l.seq = ANY(ARRAY(SELECT a.s FROM unnest(v_s, v_verdict) AS a(s, verdict)
                              WHERE a.verdict IN ('acked', 'dropped')));
    UPDATE queen.eph_lease l SET expires_at = '-infinity'
     WHERE l.queue = p_queue AND l.grp = p_group
       AND l.seq = ANY(ARRAY(SELECT a.s FROM unnest(v_s, v_verdict) AS a(s, verdict)
                              WHERE a.verdict = 'redelivered'));
    SELECT count(*) FILTER (WHERE verdict = 'dropped'),
           count(*) FILTER (WHERE verdict = 'redelivered'),
           array_agg(DISTINCT p) FILTER (WHERE verdict IN ('acked', 'dropped'))
      INTO n_drops, n_redelivered, touched
      FROM unnest(v_p, v_verdict) AS a(p, verdict);
    UPDATE queen.eph_queue SET touched_at = now(), drops_retry = drops_retry + n_drops
     WHERE queue = p_queue;
    IF touched IS NOT NULL THEN
        PERFORM queen.eph_free(p_queue, touched);
    END IF;
    IF n_redelivered > 0 THEN
        PERFORM pg_notify(p_channel, p_queue);
    END IF;
    RETURN QUERY SELECT a.i, CASE WHEN a.verdict = 'dropped' THEN 'acked' ELSE a.verdict END
                   FROM unnest(v_i, v_verdict) AS a(i, verdict) ORDER BY a.i;
END $$;

-- Reset (§19.6): drop every message and lease, keep cursors (every later seq is past
-- them: they are at the tail) and the declaration. Answers the messages dropped.
CREATE OR REPLACE FUNCTION queen.eph_reset(p_queue text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    IF NOT queen.eph_lock(p_queue, false) THEN
        RETURN 0;
    END IF;
    DELETE FROM queen.eph_lease WHERE queue = p_queue;
    DELETE FROM queen.eph_message WHERE queue = p_queue;
    GET DIAGNOSTICS n = ROW_COUNT;
    UPDATE queen.eph_queue SET depth = 0, bytes = 0, touched_at = now() WHERE queue = p_queue;
    RETURN n;
END $$;

-- Delete (§19.6): contents, cursors and declaration. Answers (deleted, declared).
CREATE OR REPLACE FUNCTION queen.eph_delete(p_queue text, OUT deleted boolean, OUT declared boolean)
LANGUAGE plpgsql AS $$
DECLARE
    live boolean;
BEGIN
    live := queen.eph_lock(p_queue, false);
    DELETE FROM queen.eph_declared WHERE queue = p_queue;
    declared := FOUND;
    DELETE FROM queen.eph_lease WHERE queue = p_queue;
    DELETE FROM queen.eph_message WHERE queue = p_queue;
    DELETE FROM queen.eph_cursor WHERE queue = p_queue;
    DELETE FROM queen.eph_group WHERE queue = p_queue;
    DELETE FROM queen.eph_partition WHERE queue = p_queue;
    DELETE FROM queen.eph_queue WHERE queue = p_queue;
    deleted := live OR declared;
END $$;

-- One batch of the sweep (§19.2: at least every second; core/ephemeral/sweeper.py calls
-- it): ttl and lease expiry, and implicit queues empty and untouched for p_idle_seconds are
-- collected. Harmless when several run: a queue another call holds is skipped (it is being
-- touched anyway), only one batch runs at a time (advisory lock), and doing it twice changes
-- nothing. Notifies `p_channel` with each queue where leases passed (redeliveries for its
-- waiting pops); answers those queues, or NULL when another sweep was running.
CREATE OR REPLACE FUNCTION queen.eph_sweep(p_idle_seconds integer, p_channel text, p_after text,
                                p_limit integer, OUT woken text[], OUT last_queue text)
LANGUAGE plpgsql AS $$
DECLARE
    q record;
    o record;
    seen integer := 0;
BEGIN
    -- One batch of at most p_limit queues, in name order after p_after: a call stays short
    -- however many queues there are, and the caller goes on from last_queue (NULL once the
    -- batch came back short, i.e. the end was reached).
    IF NOT pg_try_advisory_xact_lock(7431, 19) THEN
        RETURN;  -- another sweep is running: woken NULL
    END IF;
    woken := '{}';
    FOR q IN
        SELECT e.queue FROM queen.eph_queue e
         WHERE e.queue > p_after
           AND (EXISTS (SELECT 1 FROM queen.eph_lease l
                         WHERE l.queue = e.queue AND l.expires_at <= now()
                           AND l.expires_at > '-infinity')
                OR EXISTS (SELECT 1 FROM queen.eph_declared d
                            WHERE d.queue = e.queue AND d.ttl_seconds > 0)
                OR (e.depth = 0
                    AND e.touched_at < now() - make_interval(secs => p_idle_seconds)))
         ORDER BY e.queue
         LIMIT p_limit
    LOOP
        seen := seen + 1;
        last_queue := q.queue;
        PERFORM 1 FROM queen.eph_queue WHERE queue = q.queue FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        o := queen.eph_options(q.queue);
        IF queen.eph_expire(q.queue, o.ttl_seconds, o.retry_limit) THEN
            woken := woken || q.queue;
            PERFORM pg_notify(p_channel, q.queue);
        END IF;
        IF NOT EXISTS (SELECT 1 FROM queen.eph_declared d WHERE d.queue = q.queue) THEN
            DELETE FROM queen.eph_queue
             WHERE queue = q.queue AND depth = 0
               AND touched_at < now() - make_interval(secs => p_idle_seconds);
            IF FOUND THEN
                DELETE FROM queen.eph_lease WHERE queue = q.queue;
                DELETE FROM queen.eph_cursor WHERE queue = q.queue;
                DELETE FROM queen.eph_group WHERE queue = q.queue;
                DELETE FROM queen.eph_partition WHERE queue = q.queue;
            END IF;
        END IF;
    END LOOP;
    IF seen < p_limit THEN
        last_queue := NULL;
    END IF;
END $$;
