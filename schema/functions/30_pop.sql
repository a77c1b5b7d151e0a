-- The read path: a pop is one statement over candidates it already knows.
--
-- Each broker process keeps, per (queue, consumer group), the partitions it knows to be
-- ready (core/engine/ready: fed by commits, notifications, verdicts and a paged reseed).
-- A pop hands a few of them to queen.pop_ready, which does the whole claim in one call: look
-- up the addressed queues with the group's stored subscription (storing it at the group's
-- first pop of the queue), lock the candidates' cursors with SKIP LOCKED or create them on
-- first contact (seeded by the subscription rule), spend the batch budget across up to
-- `width` of them, lease the delivered spans (or, with autoAck, commit them), answer the
-- segments overlapping each span, and say of every other candidate why it gave nothing
-- (empty, leased until, held by the clock until, busy). It never scans the queue's
-- partitions: that is the reseed's (queries/ready.sql), paged. Decompressing and slicing the
-- segments is the caller's (PostgreSQL has no zstd).
--
-- Queue options the claim applies (wire-protocol §4.9; docs/reference/queue-options.md):
-- * retryDelay (ms): a `failed` ack within the retry budget, or a `retry` ack, releases the
--   span with a not-before time (log_consumers.not_before = now() + retryDelay); the span is
--   not claimable before it, so a poison message is redelivered at that pace instead of at
--   once. Dead-lettering, dropping, a completed ack, a claim and a seek clear it. The claim
--   answers such a candidate `later` with that time.
-- * maxWaitTimeSeconds: when a pop claims a cursor, messages appended longer ago than that
--   are skipped: the cursor moves past them without delivering them, and they are counted in
--   log_consumers.evicted (only spans nobody holds are evicted; a leased batch is left to
--   its holder).
-- * minPopWaitTime (ms): a span that cannot fill the pop's remaining budget is not claimed
--   until its oldest message has waited that long (more messages may arrive meanwhile).
-- * delayedProcessing (s): only messages appended that long ago are visible.
-- * windowBuffer (s): a partition is claimable only once it has been quiet that long.
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
-- * The width (partitions a pop wants): the partition route 1; a conflating pop
--   p_conflation_width; else `partitions` (the autopilot chooses it in the process, from its
--   ready set: core/engine/autopilot.py). Each answer row carries its queue's effective
--   policy and the width used.
--
-- Types: queen.pop_queue (migration 025, 082: an addressed queue as the claim needs it),
-- queen.ready_answer (093: a row of queen.pop_ready's answer).
--
-- Every statement below that reads or writes a partition's rows names one partition id (a
-- loop over the candidates, not a join of the list with the tables): on Citus the call runs
-- on the node of the shard its candidates live on (`p_route`, the broker groups candidates
-- by shard: core/engine/ready/reader.py), and each such statement then reads and writes
-- that node's rows only (docs/deploying/citus.md).
--
-- The functions below run their statements with generic plans (planned once per
-- connection) and without sequential scans: re-planning them at each call, PL/pgSQL's
-- default while their parameters vary, cost more than running them, and a generic plan's
-- guesses about array arguments must never turn into a scan of a table that is small in
-- live rows but large in dead versions (cursors and partitions are updated all the time).

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
    i         integer;
    v_pid     bigint;
    v_seed    bigint;
    v_lease   integer;
    c         record;
    h         record;
    qr        record;
    -- On Citus, each partition's placement is held before its rows are read (below); asked
    -- once here, not by a call per partition (a statement each, on one PostgreSQL too).
    v_citus   boolean := to_regprocedure('pg_catalog.lock_shard_metadata(integer, bigint[])')
                         IS NOT NULL;
BEGIN
    IF true = ANY(p_fresh) THEN
        -- First contact: every missing cursor among the candidates is created, seeded by
        -- the subscription rule, in partition order whatever the candidates' order: two
        -- first pops creating the same cursors then queue behind one another (ON CONFLICT
        -- waits for the other's commit) instead of each waiting for the other's insert (a
        -- deadlock, 40P01). Created ahead of the walk, so no lock is taken out of order.
        FOR v_pid IN SELECT u.id FROM unnest(p_candidates, p_fresh) AS u(id, fresh)
                      WHERE u.fresh ORDER BY u.id LOOP
            IF v_citus THEN  -- reads below, then writes (90_distribution)
                PERFORM queen.hold_placement(v_pid);
            END IF;
            SELECT p.queue_id, p.last_offset, p.log_start INTO h
              FROM queen.log_partitions p WHERE p.id = v_pid;
            CONTINUE WHEN NOT FOUND;
            SELECT * INTO qr FROM unnest(p_queues) x WHERE x.id = h.queue_id;
            CONTINUE WHEN NOT FOUND;
            v_seed := CASE qr.seed_mode
                 WHEN 'new' THEN h.last_offset
                 WHEN 'timestamp' THEN greatest(h.log_start - 1, coalesce(
                      (SELECT s.last_offset FROM queen.log_segments s
                        WHERE s.partition_id = v_pid AND s.created_at < qr.seed_instant
                        ORDER BY s.base_offset DESC LIMIT 1), h.log_start - 1))
                 ELSE h.log_start - 1
               END;
            INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
            VALUES (v_pid, p_group, v_seed)
            ON CONFLICT ON CONSTRAINT log_consumers_pkey DO NOTHING;
        END LOOP;
    END IF;

    FOREACH v_pid IN ARRAY p_candidates LOOP
        EXIT WHEN v_budget <= 0 OR cardinality(v_ids) >= p_wanted;
        -- On Citus, before the cursor is read: the UPDATE below must write the copy the
        -- read saw (a shard move in between: 90_distribution.sql, queen.hold_placement).
        IF v_citus THEN
            PERFORM queen.hold_placement(v_pid);
        END IF;
        SELECT p.id, p.last_offset, p.log_start, q.delay_seconds, q.lease_seconds,
               q.max_wait_seconds, q.min_pop_wait_ms, q.conflation
          INTO c
          FROM queen.log_partitions p JOIN unnest(p_queues) q ON q.id = p.queue_id
         WHERE p.id = v_pid;
        CONTINUE WHEN NOT FOUND;
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
    FOR i IN 1 .. cardinality(e_ids) LOOP  -- evicted heads: the cursor moves past them
        -- Plain variables, no array elements, in a statement on a distributed table: Citus
        -- 13.2 crashes on an element of an array argument there (local execution).
        v_pid := e_ids[i];
        v_end := e_tops[i];
        v_start := e_counts[i];
        UPDATE queen.log_consumers x
           SET committed = greatest(x.committed, v_end), retry_count = 0,
               evicted = x.evicted + v_start
         WHERE x.partition_id = v_pid AND x.consumer_group = p_group;
    END LOOP;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;

    -- One cursor at a time, by its primary key: a join of the spans with the group's
    -- cursors lets a generic plan read every cursor of the group (its group index), a cost
    -- that grows with the partitions the group has ever read.
    FOR i IN 1 .. cardinality(v_ids) LOOP
        v_pid := v_ids[i];  -- plain variables (see the eviction above)
        v_start := v_los[i];
        v_end := v_ends[i];
        v_lease := v_secs[i];
        IF p_auto_ack THEN  -- at-most-once: the cursor moves inside the pop's own transaction
            UPDATE queen.log_consumers x
               SET committed = v_end, batch_end = NULL, worker_id = NULL,
                   lease_expires_at = NULL, retry_count = 0,
                   total_consumed = x.total_consumed + (v_end - v_start + 1),
                   last_consumed_at = now(), not_before = NULL
             WHERE x.partition_id = v_pid AND x.consumer_group = p_group;
        ELSE
            UPDATE queen.log_consumers x
               SET committed = v_start - 1, batch_end = v_end, worker_id = p_lease_id,
                   lease_expires_at = now() + make_interval(secs => v_lease),
                   last_consumed_at = now(), not_before = NULL
             WHERE x.partition_id = v_pid AND x.consumer_group = p_group;
        END IF;
    END LOOP;
    RETURN QUERY SELECT * FROM unnest(v_ids, v_starts, v_ends);
END $$;

-- Claim among known candidates and read (see the top of this file).
--   p_route               on Citus, a number of the shard every candidate lives on: Citus
--                         runs the call on that shard's node (core/storage/shards.py); null:
--                         no shard in particular (no candidates, or one PostgreSQL)
--   p_tenant              the tenant whose queues the pop addresses (migration 140)
--   p_queue               queue name, or null for a discovery pop by p_namespace / p_task
--   p_partition           partition name, or null (any): named, it is the only candidate
--   p_group, p_named      consumer group; named = not the implicit __QUEUE_MODE__ group
--   p_seed_mode, p_seed_instant   the request's first-contact rule (all | new | timestamp)
--   p_store_seed          remember it as the group's subscription if it has none yet
--   p_batch, p_partitions budget of messages, most partitions
--   p_auto_ack            commit instead of leasing
--   p_lease_seconds       the request's lease length (0 = the queue's leaseTime)
--   p_lease_fallback      lease length when both are 0
--   p_lease_id            the lease id of this pop; with a route, the lease's partitions are
--                         recorded under it (queen.log_leases: what an extension reads)
--   p_candidates          partition ids, in preference order (ignored with p_partition);
--                         none: the statement only looks up (and registers) the queues
--   p_conflation          the policy this pop declares (stored if the group has none yet)
--   p_conflation_width    partitions a conflating pop claims
--   p_max_bytes           the answer's byte budget (QUEEN_POP_MAX_BYTES, see below)
-- Rows (queen.ready_answer, by verdict): `took` per segment of each delivered span (in claim
-- order); `empty` / `leased` / `later` / `busy` per other candidate (see migration 093; a
-- `later` that minPopWaitTime alone holds gives the span that waits: see below);
-- `full` once, when the byte budget cut the delivery (partition_id: where); `queue` per
-- addressed queue. Nothing at all for an unknown queue.
--
-- The byte budget: a pop's batch may be 10000 messages of up to 16 MiB each, and a web
-- worker builds the whole answer in memory (a few times its size), so the segments are read
-- in claim order while their bytes fit in p_max_bytes. A segment's bytes are its frames'
-- uncompressed size where the append recorded it (log_segments.raw_bytes, migration 161),
-- else its stored size (octet_length reads it from the TOAST pointer); a segment delivered
-- in part counts that share of its bytes (its messages taken at their average size). At the
-- segment that does not fit, the delivery stops: that segment gives the share of its
-- messages that fits (at their average size; at least one when nothing came before, so a
-- message larger than the budget goes out alone), and the spans are cut there. The cursor
-- of a span cut short is moved back in the same transaction (a lease ends at the cut, or
-- autoAck commits only up to it), and a claimed span left out entirely is released, so
-- what the budget left out is neither leased nor committed: the cut partitions are answered
-- `busy` (ready for the next pop). Only the segments delivered are read (the loop stops at
-- the cut). Took rows give the span's end as the claim made it; the end of what a span
-- delivers is the smaller of its last row's span_end and last_offset (the cut
-- segment's row carries the cut offset as span_end; a span cut between segments ends with
-- its last segment).
CREATE OR REPLACE FUNCTION queen.pop_ready(
    p_route bigint, p_tenant text, p_queue text, p_namespace text, p_task text,
    p_partition text, p_group text,
    p_named boolean, p_seed_mode text, p_seed_instant timestamptz, p_store_seed boolean,
    p_batch integer, p_partitions integer, p_auto_ack boolean, p_lease_seconds integer,
    p_lease_fallback integer, p_lease_id text, p_candidates bigint[], p_conflation boolean,
    p_conflation_width integer, p_max_bytes bigint)
RETURNS SETOF queen.ready_answer
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    v_queues  queen.pop_queue[] := '{}';
    v_qids    bigint[] := '{}';
    v_conf_qids bigint[] := '{}';  -- the addressed queues whose group conflates
    v_wanted  integer;
    v_conf    boolean;
    v_smode   text;
    v_sinst   timestamptz;
    v_mode    text;
    v_instant timestamptz;
    v_lease   integer;
    v_cands   bigint[];
    v_ids     bigint[];
    v_fresh   boolean[];
    v_got_ids bigint[] := '{}';  -- the spans delivered: partition, first, last
    v_got_lo  bigint[] := '{}';
    v_got_hi  bigint[] := '{}';
    v_pid     bigint;
    v_fresh1  boolean;
    v_qof     bigint[];      -- each of v_ids' queue
    v_qid1    bigint;
    v_reached integer;       -- how many of v_ids the claim walked (see below)
    v_scanned integer := 0;  -- how many of v_cands were scanned (see below)
    v_need    integer;       -- candidates a round scans for (null: all; see below)
    v_from    integer;       -- v_ids before this round's scan
    v_budget  integer;       -- messages still wanted: the batch, less what was claimed
    v_k_ids   bigint[];      -- the last claim's spans: partition, first, last
    v_k_lo    bigint[];
    v_k_hi    bigint[];
    v_lo      bigint;
    v_hi      bigint;
    v_count   bigint;
    v_bytes   bigint;
    v_used    bigint := 0;   -- the answer's bytes so far (see the byte budget above)
    v_kept    bigint := 0;   -- messages in it so far
    v_take    bigint;
    v_cut     integer := 0;  -- the span the budget cut (0: none)
    v_cut_end bigint;        -- its last delivered offset (below its first: none)
    v_due     timestamptz;
    v_due_of  bigint;
    v_row     queen.ready_answer;
    sg        record;       -- a segment of a delivered span
    v_until   timestamptz;
    v_kind    text;          -- a candidate's verdict (`held`: `later`, by minPopWaitTime)
    v_held    boolean;
    v_expiry  timestamptz;
    r         record;
    w         record;
BEGIN
    FOR r IN
        SELECT q.id, q.name, q.options, s.mode, s.subscription_from, s.conflation,
               s.queue_id IS NOT NULL AS registered
          FROM queen.queues q
          LEFT JOIN queen.consumer_subscriptions s
            ON s.queue_id = q.id AND s.consumer_group = p_group
         WHERE q.tenant = p_tenant
           AND CASE WHEN p_queue IS NOT NULL THEN q.name = p_queue
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
    END LOOP;
    IF cardinality(v_qids) = 0 THEN
        RETURN;
    END IF;

    IF p_partition IS NOT NULL THEN
        v_wanted := 1;
        SELECT array_agg(d.partition_id ORDER BY d.partition_id) INTO v_cands
          FROM queen.partition_directory d
         WHERE d.queue_id = ANY(v_qids) AND d.name = p_partition;
    ELSE
        v_wanted := CASE WHEN cardinality(v_conf_qids) > 0
                         THEN least(greatest(p_conflation_width, 1), 64)
                         ELSE greatest(p_partitions, 1) END;
        v_cands := p_candidates;
    END IF;
    v_cands := coalesce(v_cands, '{}');

    -- The candidates of the addressed queues with kept messages, in the order given; a
    -- windowBuffer holds a partition written to less than that long ago (answered below).
    -- Each is a statement to scan, so they are scanned only as far as the claim needs
    -- them when the pop addresses one queue whose claims lock only the cursors they take
    -- (no delayedProcessing, minPopWaitTime or maxWaitTimeSeconds): first as many as
    -- could satisfy the pop (least(v_wanted, p_batch): a partition delivers one message
    -- at least), then, if that claim fell short, the rest in a second claim. A pop of one
    -- message usually takes its first candidate, and scanned the seven others for
    -- nothing. The candidates never scanned are answered `busy` without a read, as those
    -- the claim never reached (below). Cursors are created before the pop locks any
    -- (see queen.pop_claim): a candidate without one met in the first scan makes it scan
    -- them all (one claim, as before); met after a claim that took something, it is left
    -- out of the second (its verdict, read below, is `busy`: looked at again soon).
    v_ids := '{}';
    v_fresh := '{}';
    v_qof := '{}';
    v_budget := p_batch;
    v_need := CASE WHEN cardinality(v_queues) = 1
                        AND coalesce(greatest((v_queues[1]).delay_seconds,
                                              (v_queues[1]).min_pop_wait_ms,
                                              (v_queues[1]).max_wait_seconds), 0) <= 0
                   THEN least(v_wanted, p_batch) END;  -- null: scan them all
    LOOP
        v_from := cardinality(v_ids);
        WHILE v_scanned < cardinality(v_cands)
              AND (v_need IS NULL OR cardinality(v_ids) < v_from + v_need) LOOP
            v_scanned := v_scanned + 1;
            v_pid := v_cands[v_scanned];
            SELECT NOT EXISTS (SELECT 1 FROM queen.log_consumers x
                                WHERE x.partition_id = v_pid AND x.consumer_group = p_group),
                   p.queue_id
              INTO v_fresh1, v_qid1
              FROM queen.log_partitions p JOIN unnest(v_queues) q ON q.id = p.queue_id
             WHERE p.id = v_pid
               AND p.last_offset >= p.log_start
               AND (q.window_buffer = 0
                    OR p.last_write_at <= now() - make_interval(secs => q.window_buffer));
            CONTINUE WHEN NOT FOUND;
            IF v_fresh1 THEN
                CONTINUE WHEN cardinality(v_got_ids) > 0;  -- the pop holds cursors already
                v_need := NULL;
            END IF;
            v_ids := v_ids || v_pid;
            v_fresh := v_fresh || v_fresh1;
            v_qof := v_qof || v_qid1;
        END LOOP;
        EXIT WHEN cardinality(v_ids) = v_from;  -- nothing more to claim
        -- The candidates scanned since the last claim, for what is still wanted (all of it
        -- at the first): partitions and messages.
        SELECT coalesce(array_agg(k.partition_id), '{}'),
               coalesce(array_agg(k.span_start), '{}'), coalesce(array_agg(k.span_end), '{}')
          INTO v_k_ids, v_k_lo, v_k_hi
          FROM queen.pop_claim(v_queues, v_ids[v_from + 1 :], v_fresh[v_from + 1 :],
                               p_group, v_wanted - cardinality(v_got_ids), v_budget,
                               p_auto_ack, p_lease_id) k;
        v_got_ids := v_got_ids || v_k_ids;
        v_got_lo := v_got_lo || v_k_lo;
        v_got_hi := v_got_hi || v_k_hi;
        -- Enough partitions: an expression, no query (a pop of one, the common case).
        EXIT WHEN cardinality(v_got_ids) >= v_wanted;
        v_budget := v_budget - coalesce((SELECT sum(h - l + 1)
                                           FROM unnest(v_k_lo, v_k_hi) AS g(l, h)), 0);
        EXIT WHEN v_budget <= 0 OR v_scanned >= cardinality(v_cands);
        v_need := NULL;  -- the rest, in one more claim
    END LOOP;
    -- The claim walks v_ids in order and stops once it has what it wanted (v_wanted
    -- partitions, or p_batch messages): the candidates after the last one it took were
    -- never reached. They are answered `busy` below without reading their rows (two
    -- statements each otherwise, most of a small pop's cost), which the process files as
    -- ready, as it files any `busy` candidate of a pop that got what it wanted.
    v_reached := cardinality(v_ids);
    IF cardinality(v_got_ids) >= v_wanted OR v_budget <= 0 THEN
        v_reached := array_position(v_ids, v_got_ids[cardinality(v_got_ids)]);
    END IF;

    -- The answer: per delivered span (in claim order), the segments overlapping it, while
    -- they fit in the byte budget (see above).
    FOR i IN 1 .. cardinality(v_got_ids) LOOP  -- one span at a time (see the top of this file)
        v_pid := v_got_ids[i];
        v_lo := v_got_lo[i];
        v_hi := v_got_hi[i];
        FOR sg IN
            SELECT p.queue_id, q.name AS queue, p.name AS partition, x.retry_count,
                   s.base_offset, s.created_at, s.blob, s.last_offset,
                   s.last_offset - s.base_offset + 1 AS frames, s.bytes
              FROM queen.log_partitions p
              JOIN queen.queues q ON q.id = p.queue_id
              -- the cursor by its primary key (see the UPDATE in pop_claim)
              CROSS JOIN LATERAL (SELECT y.retry_count FROM queen.log_consumers y
                                   WHERE y.partition_id = v_pid AND y.consumer_group = p_group
                                   LIMIT 1) x
              CROSS JOIN LATERAL (
                    SELECT y.base_offset, y.created_at, y.blob, y.last_offset,
                           coalesce(y.raw_bytes, octet_length(y.blob)) AS bytes
                      FROM queen.log_segments y
                     WHERE y.partition_id = v_pid
                       AND y.base_offset <= v_hi
                       AND y.base_offset >= coalesce((SELECT max(z.base_offset)
                                                        FROM queen.log_segments z
                                                       WHERE z.partition_id = v_pid
                                                         AND z.base_offset <= v_lo), v_lo)) s
             WHERE p.id = v_pid
             ORDER BY s.base_offset
        LOOP
            v_count := least(v_hi, sg.last_offset) - greatest(v_lo, sg.base_offset) + 1;
            v_bytes := sg.bytes * v_count / sg.frames;
            IF v_used + v_bytes > p_max_bytes THEN
                -- The budget trips here: the share of this segment's messages that fits.
                v_take := least((p_max_bytes - v_used) * sg.frames / greatest(sg.bytes, 1),
                                v_count - 1);
                IF v_kept = 0 THEN  -- the pop's first message goes out whatever its size
                    v_take := greatest(v_take, 1);
                END IF;
                v_cut := i;
                v_cut_end := greatest(v_lo, sg.base_offset) + v_take - 1;
                EXIT WHEN v_take <= 0;
            END IF;
            v_used := v_used + v_bytes;
            v_kept := v_kept + v_count;
            IF v_due_of IS DISTINCT FROM sg.queue_id THEN  -- when its lease ends (none with autoAck)
                v_due_of := sg.queue_id;
                v_due := CASE WHEN NOT p_auto_ack THEN
                              (SELECT now() + make_interval(secs => q.lease_seconds)
                                 FROM unnest(v_queues) q WHERE q.id = sg.queue_id) END;
            END IF;
            v_row := ROW('took', sg.queue_id, sg.queue, v_pid, sg.partition, v_lo,
                         CASE WHEN v_cut > 0 THEN v_cut_end ELSE v_hi END, sg.retry_count,
                         sg.base_offset, sg.created_at, sg.blob, sg.last_offset,
                         sg.queue_id = ANY(v_conf_qids), v_wanted, v_due);
            RETURN NEXT v_row;
            EXIT WHEN v_cut > 0;
        END LOOP;
        IF v_cut > 0 THEN
            RETURN NEXT ROW('full', sg.queue_id, NULL::text, v_pid, NULL::text, NULL::bigint,
                            NULL::bigint, NULL::integer, NULL::bigint, NULL::timestamptz,
                            NULL::bytea, NULL::bigint, NULL::boolean, v_wanted,
                            NULL::timestamptz)::queen.ready_answer;
            EXIT;
        END IF;
    END LOOP;
    IF v_cut > 0 THEN
        -- What the budget left out goes back: the cut span ends at the cut, the spans after
        -- it are released (a lease) or uncommitted (autoAck), in this transaction.
        FOR i IN v_cut .. cardinality(v_got_ids) LOOP
            v_pid := v_got_ids[i];  -- plain variables (see queen.pop_claim)
            v_lo := v_got_lo[i];
            v_hi := v_got_hi[i];
            -- the last offset it keeps (below v_lo: none)
            v_take := CASE WHEN i = v_cut THEN greatest(v_cut_end, v_lo - 1) ELSE v_lo - 1 END;
            IF p_auto_ack THEN
                UPDATE queen.log_consumers x
                   SET committed = v_take,
                       total_consumed = x.total_consumed - (v_hi - v_take)
                 WHERE x.partition_id = v_pid AND x.consumer_group = p_group;
            ELSIF v_take >= v_lo THEN
                UPDATE queen.log_consumers x SET batch_end = v_take
                 WHERE x.partition_id = v_pid AND x.consumer_group = p_group;
            ELSE
                UPDATE queen.log_consumers x
                   SET batch_end = NULL, worker_id = NULL, lease_expires_at = NULL
                 WHERE x.partition_id = v_pid AND x.consumer_group = p_group;
            END IF;
        END LOOP;
        -- The spans delivered: those before the cut, and the cut one if it kept anything.
        v_got_ids := v_got_ids[1 : v_cut - CASE WHEN v_cut_end >= v_got_lo[v_cut] THEN 0
                                                ELSE 1 END];
    END IF;

    -- Why every other candidate gave nothing, and until when (the process defers it).
    FOREACH v_pid IN ARRAY v_cands[1 : v_scanned] LOOP
        CONTINUE WHEN v_pid = ANY(v_got_ids) OR v_pid = ANY(v_ids[v_reached + 1 :]);
        SELECT p.queue_id, p.name, p.last_offset, p.log_start, p.last_write_at, q.id AS qid,
               q.window_buffer, q.delay_seconds, q.min_pop_wait_ms, x.committed, x.worker_id,
               x.lease_expires_at, x.not_before, h.created_at AS head_at
          INTO w
          FROM queen.log_partitions p
          LEFT JOIN unnest(v_queues) q ON q.id = p.queue_id
          -- the cursor by its primary key (see the UPDATE in pop_claim)
          LEFT JOIN LATERAL (SELECT y.* FROM queen.log_consumers y
                              WHERE y.partition_id = v_pid AND y.consumer_group = p_group
                              LIMIT 1) x ON true
          -- the oldest message the group could get next, for delayedProcessing and
          -- minPopWaitTime
          LEFT JOIN LATERAL (
                SELECT s.created_at FROM queen.log_segments s
                 WHERE (q.delay_seconds > 0 OR q.min_pop_wait_ms > 0)
                   AND s.partition_id = v_pid
                   AND s.base_offset <= greatest(coalesce(x.committed + 1, p.log_start),
                                                 p.log_start)
                 ORDER BY s.base_offset DESC LIMIT 1) h ON true
         WHERE p.id = v_pid;
        IF NOT FOUND OR w.qid IS NULL OR w.last_offset < w.log_start
           OR w.committed >= w.last_offset THEN
            RETURN QUERY SELECT 'empty'::text, w.queue_id, NULL::text, v_pid, w.name,
                                NULL::bigint, NULL::bigint, NULL::integer, NULL::bigint,
                                NULL::timestamptz, NULL::bytea, NULL::bigint, NULL::boolean,
                                v_wanted, NULL::timestamptz;
            CONTINUE;
        END IF;
        v_until := CASE
            WHEN w.worker_id IS NOT NULL AND w.lease_expires_at > now() THEN w.lease_expires_at
            WHEN w.not_before > now() THEN w.not_before
            ELSE greatest(
                 CASE WHEN w.window_buffer > 0 THEN w.last_write_at
                      + make_interval(secs => w.window_buffer) END,
                 CASE WHEN w.delay_seconds > 0 THEN w.head_at
                      + make_interval(secs => w.delay_seconds) END,
                 CASE WHEN w.min_pop_wait_ms > 0 THEN w.head_at
                      + make_interval(secs => w.min_pop_wait_ms / 1000.0) END)
            END;
        v_kind := CASE
                  WHEN w.worker_id IS NOT NULL AND w.lease_expires_at > now() THEN 'leased'
                  WHEN w.not_before > now() THEN 'later'
                  WHEN w.window_buffer > 0 AND w.last_write_at
                       > now() - make_interval(secs => w.window_buffer) THEN 'later'
                  WHEN w.delay_seconds > 0 AND w.head_at
                       > now() - make_interval(secs => w.delay_seconds) THEN 'later'
                  WHEN w.min_pop_wait_ms > 0 AND w.head_at
                       > now() - make_interval(secs => w.min_pop_wait_ms / 1000.0)
                       THEN 'held'
                  ELSE 'busy' END;
        -- Held by minPopWaitTime alone: the row says which messages wait (its span, up to the
        -- partition's last offset, more than delayedProcessing may show yet). That hold is
        -- the pop's batch's: a pop whose budget that span fills takes it now, and the process
        -- keeps the partition from larger pops only (core/engine/ready/lane.py `hold`). Not
        -- said of a conflating group's partition, which minPopWaitTime never holds.
        v_held := v_kind = 'held' AND NOT w.queue_id = ANY(v_conf_qids);
        RETURN QUERY SELECT CASE WHEN v_kind = 'held' THEN 'later' ELSE v_kind END,
                   w.queue_id, NULL::text, v_pid, w.name,
                   CASE WHEN v_held THEN greatest(w.committed + 1, w.log_start) END,
                   CASE WHEN v_held THEN w.last_offset END,
                   NULL::integer, NULL::bigint, NULL::timestamptz, NULL::bytea, NULL::bigint,
                   NULL::boolean, v_wanted, v_until;
    END LOOP;
    RETURN QUERY SELECT 'busy'::text, u.q, NULL::text, u.p, NULL::text, NULL::bigint,
                        NULL::bigint, NULL::integer, NULL::bigint, NULL::timestamptz,
                        NULL::bytea, NULL::bigint, NULL::boolean, v_wanted, NULL::timestamptz
                   FROM unnest(v_ids[v_reached + 1 :], v_qof[v_reached + 1 :]) AS u(p, q);
    IF v_scanned < cardinality(v_cands) THEN  -- never scanned: of the one queue addressed
        RETURN QUERY SELECT 'busy'::text, v_qids[1], NULL::text, u.p, NULL::text,
                            NULL::bigint, NULL::bigint, NULL::integer, NULL::bigint,
                            NULL::timestamptz, NULL::bytea, NULL::bigint, NULL::boolean,
                            v_wanted, NULL::timestamptz
                       FROM unnest(v_cands[v_scanned + 1 :]) AS u(p);
    END IF;

    IF p_route IS NOT NULL AND NOT p_auto_ack AND cardinality(v_got_ids) > 0 THEN
        -- Where this lease's partitions are (migration 150): one row on this shard, which a
        -- pop's second statement (same lease, same shard) adds to.
        SELECT max(now() + make_interval(secs => q.lease_seconds)) INTO v_expiry
          FROM unnest(v_queues) q;
        INSERT INTO queen.log_leases AS l (route, lease_id, partition_ids, expires_at)
        VALUES (p_route, p_lease_id, v_got_ids, v_expiry)
        ON CONFLICT ON CONSTRAINT log_leases_pkey DO UPDATE
           SET partition_ids = l.partition_ids || excluded.partition_ids,
               expires_at = greatest(l.expires_at, excluded.expires_at);
    END IF;

    RETURN QUERY SELECT 'queue'::text, q.id, q.name, NULL::bigint, NULL::text, NULL::bigint,
                        NULL::bigint, NULL::integer, NULL::bigint, NULL::timestamptz,
                        NULL::bytea, NULL::bigint, q.conflation, v_wanted, NULL::timestamptz
                   FROM unnest(v_queues) q;
END $$;

-- queen.pop_ready as brokers of the version before the byte budget call it (without
-- p_max_bytes): during a rolling upgrade they keep popping, within the default budget
-- (QUEEN_POP_MAX_BYTES, 64 MiB), until they are replaced (docs/operating/upgrades.md).
CREATE OR REPLACE FUNCTION queen.pop_ready(
    p_route bigint, p_tenant text, p_queue text, p_namespace text, p_task text,
    p_partition text, p_group text,
    p_named boolean, p_seed_mode text, p_seed_instant timestamptz, p_store_seed boolean,
    p_batch integer, p_partitions integer, p_auto_ack boolean, p_lease_seconds integer,
    p_lease_fallback integer, p_lease_id text, p_candidates bigint[], p_conflation boolean,
    p_conflation_width integer)
RETURNS SETOF queen.ready_answer
LANGUAGE sql
AS $$
    SELECT * FROM queen.pop_ready(p_route, p_tenant, p_queue, p_namespace, p_task,
                                  p_partition, p_group, p_named, p_seed_mode, p_seed_instant,
                                  p_store_seed, p_batch, p_partitions, p_auto_ack,
                                  p_lease_seconds, p_lease_fallback, p_lease_id, p_candidates,
                                  p_conflation, p_conflation_width, 64 * 1024 * 1024)
$$;
