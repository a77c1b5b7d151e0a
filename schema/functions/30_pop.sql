-- The read path: a pop is one statement.
--
-- queen.pop does the whole claim in one call, so an attempt (and a long poll's re-check)
-- costs one round trip: look up the addressed queues with the group's stored subscription
-- (storing it at the group's first pop of the queue), find candidate partitions (those a
-- wake-up named first, then a scan from a random pivot), lock their cursors with SKIP
-- LOCKED or create them on first contact (seeded by the subscription rule), spend the batch
-- budget across up to `width` of them, lease the delivered spans (or, with autoAck, commit
-- them), and answer the segments overlapping each span. Decompressing and slicing the
-- segments is the caller's (PostgreSQL has no zstd). queen.pop_shared serves several
-- identical pops of one process in one statement.
--
-- Queue options the claim applies (wire-protocol §4.9; docs/reference/queue-options.md):
-- * retryDelay (ms): a `failed` ack within the retry budget, or a `retry` ack, releases the
--   span with a not-before time (log_consumers.not_before = now() + retryDelay); the span is
--   not claimable before it, so a poison message is redelivered at that pace instead of at
--   once. Dead-lettering, dropping, a completed ack, a claim and a seek clear it. A delayed
--   release wakes no parked pop; the reaper announces it when it is due (migration 028).
-- * maxWaitTimeSeconds: when a pop claims a cursor, messages appended longer ago than that
--   are skipped: the cursor moves past them without delivering them, and they are counted in
--   log_consumers.evicted (only spans nobody holds are evicted; a leased batch is left to
--   its holder).
-- * minPopWaitTime (ms): a span that cannot fill the pop's remaining budget is not claimed
--   until its oldest message has waited that long (more messages may arrive meanwhile).
-- * delayedProcessing, windowBuffer: see queen.pop_eligible.
-- (retentionEnabled gates the reaper's retention: queries/reaper.sql.)
--
-- Conflation and width (wire-protocol-extensions §20):
-- * The conflation policy of a (queue, group) is stored with the group's subscription record,
--   written by the group's first pop of the queue on any route (the partition route
--   included) and read by every later one: `conflation` is true iff that pop declared
--   `conflation=true`. A record the partition route writes holds no first-contact choice
--   (mode null) until the group's first wildcard or discovery pop stores one. Deleting the
--   record (group delete with deleteMetadata, queue delete) forgets the policy.
-- * For a conflating queue a claimed partition delivers only its newest visible message,
--   leased with the span (committed, tail] (batch_end = tail); queen.ack then treats a
--   signal on that tail as one at the head.
-- * The width (partitions a pop wants): the partition route 1; the autopilot divides the
--   partitions ready for the group among the lane's pops in flight; a conflating pop
--   p_conflation_width; else `partitions`. Each answer row carries its queue's effective
--   policy and the width used.
--
-- Types (migrations 025 and 082): queen.pop_queue (an addressed queue as the claim needs
-- it), queen.pop_row (a segment of a delivered span), queen.pop_answer (pop_row, the
-- queue's conflation policy and the width).
--
-- The functions below run their statements with generic plans (planned once per
-- connection) and without sequential scans: re-planning them at each call, PL/pgSQL's
-- default while their parameters vary, cost more than running them, and a generic plan's
-- guesses about array arguments must never turn into a scan of a table that is small in
-- live rows but large in dead versions (cursors and partitions are updated all the time).

-- Partitions a pop may claim: data past the group's cursor and no live lease, or no cursor
-- yet (first contact), ids in [p_from, p_to), ascending, at most p_limit; windowBuffer holds
-- a partition until it has been quiet for N seconds.
-- Options are read without defaults: every queue row holds every option (migration 021).
CREATE OR REPLACE FUNCTION queen.pop_eligible(
    p_queue_ids bigint[], p_group text, p_partition text, p_from bigint, p_to bigint,
    p_limit integer)
RETURNS TABLE (partition_id bigint, queue_id bigint, name text, last_offset bigint,
               fresh boolean)
LANGUAGE sql STABLE AS $$
    SELECT p.id, p.queue_id, p.name, p.last_offset, (c.partition_id IS NULL)
      FROM queen.log_partitions p
      JOIN queen.queues q ON q.id = p.queue_id
      LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
     WHERE p.queue_id = ANY(p_queue_ids)
       AND p.id >= p_from AND p.id < p_to
       AND (p_partition IS NULL OR p.name = p_partition)
       AND p.last_offset >= p.log_start
       AND (c.partition_id IS NULL
            OR (c.committed < p.last_offset
                AND (c.worker_id IS NULL OR c.lease_expires_at <= now())
                AND (c.not_before IS NULL OR c.not_before <= now())))
       AND ((q.options ->> 'windowBuffer')::integer = 0
            OR p.last_write_at
               <= now() - make_interval(secs => (q.options ->> 'windowBuffer')::integer))
       -- delayedProcessing: the oldest message the group could get (the segment holding
       -- the offset after its cursor, or the oldest kept one on first contact) must be old
       -- enough; segments are stamped in offset order, so when it is not, none is. Keeps a
       -- pop from walking partitions that hold only messages not yet visible.
       AND ((q.options ->> 'delayedProcessing')::integer = 0
            OR coalesce((SELECT s.created_at FROM queen.log_segments s
                          WHERE s.partition_id = p.id
                            AND s.base_offset <= greatest(coalesce(c.committed + 1, p.log_start),
                                                          p.log_start)
                          ORDER BY s.base_offset DESC LIMIT 1), '-infinity')
               <= now() - make_interval(secs => (q.options ->> 'delayedProcessing')::integer))
     ORDER BY p.id
     LIMIT p_limit
$$;

-- One claim attempt among candidates (partition ids in preference order, and whether the
-- group has no cursor there yet): create the missing cursors, then walk the candidates in
-- order, locking each claimable cursor with SKIP LOCKED and spending the budget, until
-- `p_wanted` partitions delivered, the budget is spent or the candidates run out. A
-- candidate that delivers nothing (seeded past its messages on first contact, messages not
-- yet visible to delayedProcessing or minPopWaitTime, all evicted by maxWaitTimeSeconds,
-- locked by a concurrent pop) costs nothing of the budget. For a conflating
-- queue a claimed partition delivers only its newest visible message (one of the budget).
-- Answers the delivered spans, leased under `p_lease_id` (or committed, with autoAck);
-- nothing is leased when it answers nothing.
CREATE OR REPLACE FUNCTION queen.pop_claim(
    p_queues queen.pop_queue[], p_candidates bigint[], p_fresh boolean[], p_group text,
    p_wanted integer, p_batch integer, p_auto_ack boolean, p_lease_id text)
RETURNS TABLE (partition_id bigint, span_start bigint, span_end bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    v_budget  integer := p_batch;
    v_ids     bigint[] := '{}';
    v_los     bigint[] := '{}';  -- first offset each lease covers
    v_starts  bigint[] := '{}';  -- first offset delivered
    v_ends    bigint[] := '{}';
    v_secs    integer[] := '{}';
    v_end     bigint;
    v_start   bigint;
    v_fresh   bigint;
    v_head    timestamptz;
    v_committed bigint;
    e_ids     bigint[] := '{}';
    e_tops    bigint[] := '{}';
    e_counts  bigint[] := '{}';
    c         record;
BEGIN
    IF true = ANY(p_fresh) THEN
        -- First contact: every missing cursor among the candidates is created, seeded by
        -- the subscription rule, in partition order whatever the candidates' order: two
        -- first pops creating the same cursors then queue behind one another (ON CONFLICT
        -- waits for the other's commit) instead of each waiting for the other's insert (a
        -- deadlock, 40P01). Created ahead of the walk, so no lock is taken out of order.
        INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
        SELECT p.id, p_group,
               CASE q.seed_mode
                 WHEN 'new' THEN p.last_offset
                 WHEN 'timestamp' THEN greatest(p.log_start - 1, coalesce(
                      (SELECT s.last_offset FROM queen.log_segments s
                        WHERE s.partition_id = p.id AND s.created_at < q.seed_instant
                        ORDER BY s.base_offset DESC LIMIT 1), p.log_start - 1))
                 ELSE p.log_start - 1
               END
          FROM unnest(p_candidates, p_fresh) AS u(id, fresh)
          JOIN queen.log_partitions p ON p.id = u.id
          JOIN unnest(p_queues) q ON q.id = p.queue_id
         WHERE u.fresh
         ORDER BY p.id
        ON CONFLICT ON CONSTRAINT log_consumers_pkey DO NOTHING;
    END IF;

    FOR c IN
        SELECT p.id, p.last_offset, p.log_start, q.delay_seconds, q.lease_seconds,
               q.max_wait_seconds, q.min_pop_wait_ms, q.conflation
          FROM unnest(p_candidates) WITH ORDINALITY AS u(id, ord)
          JOIN queen.log_partitions p ON p.id = u.id
          JOIN unnest(p_queues) q ON q.id = p.queue_id
         ORDER BY u.ord
    LOOP
        EXIT WHEN v_budget <= 0 OR cardinality(v_ids) >= p_wanted;
        -- Locked one at a time, only when reached: the cursors this pop does not take stay
        -- claimable by concurrent pops.
        SELECT x.committed INTO v_committed
          FROM queen.log_consumers x
         WHERE x.partition_id = c.id AND x.consumer_group = p_group
           AND x.committed < c.last_offset
           AND (x.worker_id IS NULL OR x.lease_expires_at <= now())
           AND (x.not_before IS NULL OR x.not_before <= now())
           FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        -- Offsets below log_start were removed by retention: delivery starts at log_start.
        v_start := greatest(v_committed + 1, c.log_start);
        IF c.max_wait_seconds > 0 THEN
            -- maxWaitTimeSeconds: messages that waited longer are skipped (evicted), not
            -- delivered. Segments are stamped in offset order, so they are a prefix: the
            -- walk from the head stops at the first segment young enough.
            v_fresh := (SELECT s.base_offset FROM queen.log_segments s
                         WHERE s.partition_id = c.id
                           AND s.base_offset >= coalesce(
                               (SELECT max(z.base_offset) FROM queen.log_segments z
                                 WHERE z.partition_id = c.id AND z.base_offset <= v_start),
                               v_start)
                           AND s.created_at >= now() - make_interval(secs => c.max_wait_seconds)
                         ORDER BY s.base_offset LIMIT 1);
            v_fresh := greatest(coalesce(v_fresh, c.last_offset + 1), v_start);
            IF v_fresh > v_start THEN
                e_ids := e_ids || c.id;
                e_tops := e_tops || (v_fresh - 1);
                e_counts := e_counts || (v_fresh - v_start);
                v_start := v_fresh;
            END IF;
        END IF;
        v_end := c.last_offset;
        IF c.delay_seconds > 0 THEN  -- only messages old enough are visible
            v_end := (SELECT s.last_offset FROM queen.log_segments s
                       WHERE s.partition_id = c.id
                         AND s.created_at <= now() - make_interval(secs => c.delay_seconds)
                       ORDER BY s.base_offset DESC LIMIT 1);
        END IF;
        CONTINUE WHEN v_end IS NULL;  -- nothing old enough yet
        CONTINUE WHEN v_end < v_start;
        IF c.conflation THEN
            -- Last-value delivery (extensions §20.3): only the newest visible message goes
            -- out, under a lease covering (committed, tail]; a completed ack of it commits
            -- the tail and so retires the superseded ones. One message of the budget.
            v_budget := v_budget - 1;
            v_ids := v_ids || c.id;
            v_los := v_los || v_start;
            v_starts := v_starts || v_end;
            v_ends := v_ends || v_end;
            v_secs := v_secs || c.lease_seconds;
            CONTINUE;
        END IF;
        IF c.min_pop_wait_ms > 0 AND v_end - v_start + 1 < v_budget THEN
            -- minPopWaitTime: a span that cannot fill the budget is held until its oldest
            -- message has waited that long, so more can arrive and go out with it.
            v_head := (SELECT s.created_at FROM queen.log_segments s
                        WHERE s.partition_id = c.id AND s.base_offset <= v_start
                        ORDER BY s.base_offset DESC LIMIT 1);
            CONTINUE WHEN v_head > now() - make_interval(secs => c.min_pop_wait_ms / 1000.0);
        END IF;
        v_end := least(v_end, v_start - 1 + v_budget);
        CONTINUE WHEN v_end < v_start;
        v_budget := v_budget - (v_end - v_start + 1)::integer;
        v_ids := v_ids || c.id;
        v_los := v_los || v_start;
        v_starts := v_starts || v_start;
        v_ends := v_ends || v_end;
        v_secs := v_secs || c.lease_seconds;
    END LOOP;
    IF cardinality(e_ids) > 0 THEN  -- evicted heads: the cursor moves past them
        UPDATE queen.log_consumers x
           SET committed = greatest(x.committed, e.top), retry_count = 0,
               evicted = x.evicted + e.n
          FROM unnest(e_ids, e_tops, e_counts) AS e(pid, top, n)
         WHERE x.partition_id = e.pid AND x.consumer_group = p_group;
    END IF;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;

    IF p_auto_ack THEN  -- at-most-once: the cursor moves inside the pop's own transaction
        UPDATE queen.log_consumers x
           SET committed = w.hi, batch_end = NULL, worker_id = NULL, lease_expires_at = NULL,
               retry_count = 0, total_consumed = x.total_consumed + (w.hi - w.lo + 1),
               last_consumed_at = now(), not_before = NULL
          FROM unnest(v_ids, v_los, v_ends) AS w(pid, lo, hi)
         WHERE x.partition_id = w.pid AND x.consumer_group = p_group;
    ELSE
        UPDATE queen.log_consumers x
           SET committed = w.lo - 1, batch_end = w.hi, worker_id = p_lease_id,
               lease_expires_at = now() + make_interval(secs => w.secs),
               last_consumed_at = now(), not_before = NULL
          FROM unnest(v_ids, v_los, v_ends, v_secs) AS w(pid, lo, hi, secs)
         WHERE x.partition_id = w.pid AND x.consumer_group = p_group;
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_ids, v_starts, v_ends);
END $$;

-- The answer of a pop: per delivered span (in claim order), the segments overlapping it.
CREATE OR REPLACE FUNCTION queen.pop_read(p_group text, p_ids bigint[], p_starts bigint[],
                               p_ends bigint[])
RETURNS SETOF queen.pop_row
LANGUAGE sql STABLE
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
    SELECT p.queue_id, q.name, w.pid, p.name, w.lo, w.hi, x.retry_count,
           s.base_offset, s.created_at, s.blob, s.last_offset
      FROM unnest(p_ids, p_starts, p_ends) WITH ORDINALITY AS w(pid, lo, hi, ord)
      JOIN queen.log_partitions p ON p.id = w.pid
      JOIN queen.queues q ON q.id = p.queue_id
      JOIN queen.log_consumers x ON x.partition_id = w.pid AND x.consumer_group = p_group
      CROSS JOIN LATERAL (
            SELECT y.base_offset, y.created_at, y.blob, y.last_offset
              FROM queen.log_segments y
             WHERE y.partition_id = w.pid
               AND y.base_offset <= w.hi
               AND y.base_offset >= coalesce((SELECT max(z.base_offset) FROM queen.log_segments z
                                               WHERE z.partition_id = w.pid
                                                 AND z.base_offset <= w.lo), w.lo)) s
     ORDER BY w.ord, s.base_offset
$$;

-- Claim and read (see the top of this file).
--   p_queue               queue name, or null for a discovery pop by p_namespace / p_task
--   p_partition           partition name, or null (any)
--   p_group, p_named      consumer group; named = not the implicit __QUEUE_MODE__ group
--   p_seed_mode, p_seed_instant   the request's first-contact rule (all | new | timestamp)
--   p_store_seed          remember it as the group's subscription if it has none yet
--   p_batch, p_partitions budget of messages, most partitions
--   p_auto_ack            commit instead of leasing
--   p_lease_seconds       the request's lease length (0 = the queue's leaseTime)
--   p_lease_fallback      lease length when both are 0
--   p_lease_id            the lease id of this pop
--   p_hints               partitions a wake-up named, tried first by key
--   p_pivot               random number in [0, 1): where the scan starts
--   p_candidates          candidates fetched per scan
--   p_conflation          the policy this pop declares (stored if the group has none yet)
--   p_conflation_width    partitions a conflating pop claims
--   p_auto_width, p_in_flight   the autopilot's width: ready partitions / pops in flight
-- Rows (queen.pop_answer): per delivered partition (in claim order), its span and the
-- segments overlapping it. When nothing is delivered: one row per addressed queue with only
-- queue_id, queue, conflation and width set (so a long poll knows what to wait for);
-- nothing at all for an unknown queue.
CREATE OR REPLACE FUNCTION queen.pop(
    p_queue text, p_namespace text, p_task text, p_partition text, p_group text,
    p_named boolean, p_seed_mode text, p_seed_instant timestamptz, p_store_seed boolean,
    p_batch integer, p_partitions integer, p_auto_ack boolean, p_lease_seconds integer,
    p_lease_fallback integer, p_lease_id text, p_hints bigint[], p_pivot float8,
    p_candidates integer, p_conflation boolean, p_conflation_width integer,
    p_auto_width boolean, p_in_flight integer)
RETURNS SETOF queen.pop_answer
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    v_queues  queen.pop_queue[] := '{}';
    v_qids    bigint[] := '{}';
    v_buffer  boolean := false;
    v_wanted  integer;
    v_conf    boolean;
    v_conf_qids bigint[] := '{}';  -- the addressed queues whose group conflates
    v_smode   text;
    v_sinst   timestamptz;
    v_ready   bigint;
    v_mode    text;
    v_instant timestamptz;
    v_lease   integer;
    v_ids     bigint[];
    v_fresh   boolean[];
    v_got_ids bigint[] := '{}';  -- the spans delivered so far: partition, first, last
    v_got_lo  bigint[] := '{}';
    v_got_hi  bigint[] := '{}';
    v_spent   bigint;
    v_lo      bigint;            -- the scan: partition id bounds, pivot, current page
    v_hi      bigint;
    v_at      bigint;
    v_from    bigint;
    v_to      bigint;
    v_range   integer;
    v_found   bigint;
    v_last    bigint;
    r         record;
BEGIN
    FOR r IN
        SELECT q.id, q.name, q.options, s.mode, s.subscription_from, s.conflation,
               s.queue_id IS NOT NULL AS registered
          FROM queen.queues q
          LEFT JOIN queen.consumer_subscriptions s
            ON s.queue_id = q.id AND s.consumer_group = p_group
         WHERE CASE WHEN p_queue IS NOT NULL THEN q.name = p_queue
                    ELSE (p_namespace IS NULL OR q.namespace = p_namespace)
                         AND (p_task IS NULL OR q.task = p_task) END
         ORDER BY q.id
    LOOP
        v_mode := p_seed_mode;
        v_instant := p_seed_instant;
        v_conf := false;
        IF NOT p_named THEN
            v_mode := 'all';  -- competing consumers always start at the oldest message
            v_instant := NULL;
        ELSE
            v_smode := r.mode;
            v_sinst := r.subscription_from;
            v_conf := r.conflation;
            IF NOT r.registered OR (r.mode IS NULL AND p_store_seed) THEN
                -- First pop of this group on this queue (any route): its record stores the
                -- conflation policy for good (extensions §20.2) and, on a wildcard or
                -- discovery pop, its first-contact choice, so partitions it touches later
                -- are seeded from the same instant. A record a partition pop made holds no
                -- choice (mode null) until the first such pop. DO UPDATE (not DO NOTHING)
                -- returns the row a concurrent first pop committed meanwhile; the stored
                -- policy is never changed by it.
                INSERT INTO queen.consumer_subscriptions AS s
                       (queue_id, consumer_group, mode, subscription_from, conflation)
                VALUES (r.id, p_group, CASE WHEN p_store_seed THEN p_seed_mode END,
                        CASE WHEN p_store_seed THEN coalesce(p_seed_instant, now()) END,
                        p_conflation)
                ON CONFLICT ON CONSTRAINT consumer_subscriptions_pkey DO UPDATE
                   SET mode = coalesce(s.mode, excluded.mode),
                       subscription_from = CASE WHEN s.mode IS NULL
                                                THEN excluded.subscription_from
                                                ELSE s.subscription_from END
                RETURNING s.mode, s.subscription_from, s.conflation
                     INTO v_smode, v_sinst, v_conf;
            END IF;
            IF v_smode IS NOT NULL THEN
                v_mode := v_smode;
                v_instant := v_sinst;
            END IF;
        END IF;
        IF v_conf THEN
            v_conf_qids := v_conf_qids || r.id;
        END IF;
        IF v_mode = 'new' AND v_instant IS NOT NULL THEN
            v_mode := 'timestamp';  -- a stored "new" is the instant it was first chosen
        END IF;
        v_lease := CASE WHEN p_lease_seconds > 0 THEN p_lease_seconds
                        WHEN (r.options ->> 'leaseTime')::integer > 0
                            THEN (r.options ->> 'leaseTime')::integer
                        ELSE p_lease_fallback END;
        v_queues := v_queues || ROW(r.id, r.name, v_mode, v_instant, v_lease,
                                    (r.options ->> 'delayedProcessing')::integer,
                                    (r.options ->> 'windowBuffer')::integer,
                                    (r.options ->> 'maxWaitTimeSeconds')::integer,
                                    (r.options ->> 'minPopWaitTime')::integer,
                                    v_conf)::queen.pop_queue;
        v_qids := v_qids || r.id;
        v_buffer := v_buffer OR (r.options ->> 'windowBuffer')::integer > 0;
    END LOOP;
    IF cardinality(v_qids) = 0 THEN
        RETURN;
    END IF;
    SELECT min(b.id), max(b.id) INTO v_lo, v_hi
      FROM queen.log_partitions b WHERE b.queue_id = ANY(v_qids);

    -- Width (extensions §20.3, §20.5): the partition route claims one; the autopilot
    -- divides the partitions ready for the group now (deliverable, no live lease) among the
    -- lane's pops in flight, rounded up, 1..64 (counting stops at the 64 per pop it could
    -- use); a conflating pop claims p_conflation_width (partitions if sent, else its batch,
    -- 1..64); else `partitions`.
    IF p_partition IS NOT NULL THEN
        v_wanted := 1;
    ELSIF p_auto_width THEN
        v_ready := 0;
        IF v_lo IS NOT NULL THEN
            SELECT count(*) INTO v_ready
              FROM queen.pop_eligible(v_qids, p_group, NULL, v_lo, v_hi + 1,
                                      64 * greatest(p_in_flight, 1)) e;
        END IF;
        v_wanted := least(greatest(ceil(v_ready::numeric / greatest(p_in_flight, 1)), 1),
                          64)::integer;
    ELSIF cardinality(v_conf_qids) > 0 THEN
        v_wanted := least(greatest(p_conflation_width, 1), 64);
    ELSE
        v_wanted := greatest(p_partitions, 1);
    END IF;

    -- Partitions a wake-up named (the first p_candidates), by key, in the order named; only
    -- the claim checks whether each is still claimable. Skipped when a windowBuffer may hold
    -- partitions: only the scan applies it.
    IF cardinality(p_hints) > 0 AND NOT v_buffer THEN
        SELECT array_agg(p.id ORDER BY h.ord),
               array_agg(NOT EXISTS (SELECT 1 FROM queen.log_consumers x
                                      WHERE x.partition_id = p.id
                                        AND x.consumer_group = p_group) ORDER BY h.ord)
          INTO v_ids, v_fresh
          FROM unnest(p_hints[1:p_candidates]) WITH ORDINALITY AS h(id, ord)
          JOIN queen.log_partitions p ON p.id = h.id
         WHERE p.queue_id = ANY(v_qids)
           AND (p_partition IS NULL OR p.name = p_partition)
           AND p.last_offset >= p.log_start;
        IF v_ids IS NOT NULL THEN
            SELECT v_got_ids || coalesce(array_agg(k.partition_id), '{}'),
                   v_got_lo || coalesce(array_agg(k.span_start), '{}'),
                   v_got_hi || coalesce(array_agg(k.span_end), '{}')
              INTO v_got_ids, v_got_lo, v_got_hi
              FROM queen.pop_claim(v_queues, v_ids, v_fresh, p_group, v_wanted, p_batch,
                                   p_auto_ack, p_lease_id) k;
        END IF;
    END IF;

    -- The scan walks the queues' partitions in id order from a random pivot and wraps
    -- around, so concurrent pops spread over the partitions and each gets its turn. It
    -- fetches p_candidates eligible partitions at a time and goes on past those that
    -- delivered nothing, until the pop has its partitions, its budget is spent, or no
    -- partition is left: a pop answers nothing only when nothing was deliverable to it.
    v_range := 1;
    v_at := v_lo + floor(p_pivot * (v_hi - v_lo + 1))::bigint;
    v_from := v_at;
    WHILE v_lo IS NOT NULL AND cardinality(v_got_ids) < v_wanted LOOP
        v_spent := 0;
        SELECT coalesce(sum(w.hi - w.lo + 1), 0) INTO v_spent
          FROM unnest(v_got_lo, v_got_hi) AS w(lo, hi);
        EXIT WHEN v_spent >= p_batch;
        v_to := CASE WHEN v_range = 1 THEN v_hi + 1 ELSE v_at END;
        SELECT array_agg(e.partition_id ORDER BY e.partition_id)
                   FILTER (WHERE NOT e.partition_id = ANY(v_got_ids)),
               array_agg(e.fresh ORDER BY e.partition_id)
                   FILTER (WHERE NOT e.partition_id = ANY(v_got_ids)),
               count(*), max(e.partition_id)
          INTO v_ids, v_fresh, v_found, v_last
          FROM queen.pop_eligible(v_qids, p_group, p_partition, v_from, v_to,
                                  p_candidates) e;
        IF v_ids IS NOT NULL THEN
            SELECT v_got_ids || coalesce(array_agg(k.partition_id), '{}'),
                   v_got_lo || coalesce(array_agg(k.span_start), '{}'),
                   v_got_hi || coalesce(array_agg(k.span_end), '{}')
              INTO v_got_ids, v_got_lo, v_got_hi
              FROM queen.pop_claim(v_queues, v_ids, v_fresh, p_group,
                                   v_wanted - cardinality(v_got_ids), (p_batch - v_spent)::integer,
                                   p_auto_ack, p_lease_id) k;
        END IF;
        IF v_found >= p_candidates THEN
            v_from := v_last + 1;  -- this range may hold more: its next page
        ELSIF v_range = 1 THEN
            v_range := 2;  -- wrap around to the partitions before the pivot
            v_from := v_lo;
        ELSE
            EXIT;
        END IF;
    END LOOP;

    IF cardinality(v_got_ids) > 0 THEN
        RETURN QUERY SELECT k.*, k.queue_id = ANY(v_conf_qids), v_wanted
                       FROM queen.pop_read(p_group, v_got_ids, v_got_lo, v_got_hi) k;
    ELSE
        RETURN QUERY SELECT q.id, q.name, NULL::bigint, NULL::text, NULL::bigint,
                            NULL::bigint, NULL::integer, NULL::bigint, NULL::timestamptz,
                            NULL::bytea, NULL::bigint, q.conflation, v_wanted
                       FROM unnest(v_queues) q;
    END IF;
END $$;

-- Concurrent pops of one kind served by one statement (issue 16, item 1): queen.pop once
-- per share, in one transaction. Every share is exactly the pop it stands for (its own
-- lease id, its own scan pivot, the same queue, group, partition, subscription rule, batch
-- and options as its siblings), so the one-lease-per-(partition, group) rule and every pop
-- semantic are queen.pop's. A worker sends it when several pops of the same request are
-- waiting at once (core/engine/reads/claims.py): one round trip and one commit instead of
-- one per pop. The shares are identical requests, so a share that delivers nothing proves
-- the next ones would deliver nothing either (it walked every eligible partition; those
-- locked by other transactions are being claimed by them): the loop stops there, and the
-- remaining shares cost nothing. Its fruitless answer (one row per addressed queue,
-- partition_id null) is returned for the share that got it, so the caller learns the
-- queues to wait on.
-- Rows: queen.pop's rows, each prefixed with the 1-based share it belongs to.
CREATE OR REPLACE FUNCTION queen.pop_shared(
    p_queue text, p_namespace text, p_task text, p_partition text, p_group text,
    p_named boolean, p_seed_mode text, p_seed_instant timestamptz, p_store_seed boolean,
    p_batch integer, p_partitions integer, p_auto_ack boolean, p_lease_seconds integer,
    p_lease_fallback integer, p_lease_ids text[], p_hints bigint[], p_pivots float8[],
    p_candidates integer, p_conflation boolean, p_conflation_width integer,
    p_auto_width boolean, p_in_flight integer)
RETURNS TABLE (share integer, queue_id bigint, queue text, partition_id bigint,
               partition text, span_start bigint, span_end bigint, retry_count integer,
               base_offset bigint, created_at timestamptz, blob bytea, last_offset bigint,
               conflation boolean, width integer)
LANGUAGE plpgsql
AS $$
DECLARE
    i         integer;
    delivered boolean;
    r         queen.pop_answer;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_lease_ids), 0) LOOP
        delivered := false;
        FOR r IN
            SELECT * FROM queen.pop(p_queue, p_namespace, p_task, p_partition, p_group,
                                    p_named, p_seed_mode, p_seed_instant, p_store_seed,
                                    p_batch, p_partitions, p_auto_ack, p_lease_seconds,
                                    p_lease_fallback, p_lease_ids[i], p_hints, p_pivots[i],
                                    p_candidates, p_conflation, p_conflation_width,
                                    p_auto_width, p_in_flight)
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
            conflation := r.conflation;
            width := r.width;
            RETURN NEXT;
        END LOOP;
        EXIT WHEN NOT delivered;
    END LOOP;
END $$;
