-- Version 82: conflation and the pop autopilot's width (wire-protocol-extensions §20).
--
-- * The conflation policy of a (queue, group) is stored with the group's subscription
--   record, written by the group's first pop of the queue on any route (the partition route
--   included) and read by every later one: `conflation` is true iff that pop declared
--   `conflation=true`. A record the partition route writes holds no first-contact choice
--   (mode null) until the group's first wildcard or discovery pop stores one. Groups that
--   have cursors but no record get one now (non-conflating: registered before conflation).
--   Deleting the record (group delete with deleteMetadata, queue delete) forgets the policy.
-- * queen.pop_claim: for a conflating queue a claimed partition delivers only its newest
--   visible message, leased with the span (committed, tail] (batch_end = tail).
-- * queen.pop: stores/reads the policy, chooses the width (partition route 1; autopilot:
--   ready partitions / pops in flight; conflation: p_conflation_width; else partitions) and
--   answers, per row, its queue's effective policy and the width used.
-- * queen.pop_shared (version 27): the same, for pops served together.
-- * queen.ack: a failed/dlq/retry signal on a conflated lease's tail acts as at the head
--   (retry budget, then dead-letter it and move the cursor to it), and a completed ack of a
--   conflated lease reports the superseded messages its commit retired (`conflated`).
-- Bodies are 025's and 026's with those changes; the comments there apply.

ALTER TABLE queen.consumer_subscriptions
    ALTER COLUMN mode DROP NOT NULL,                          -- null: no first-contact choice yet
    ADD COLUMN conflation boolean NOT NULL DEFAULT false;     -- last-value delivery (§20.2)

INSERT INTO queen.consumer_subscriptions (queue_id, consumer_group, mode, subscription_from)
SELECT DISTINCT p.queue_id, c.consumer_group, NULL::text, NULL::timestamptz
  FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
 WHERE c.consumer_group <> '__QUEUE_MODE__'
ON CONFLICT ON CONSTRAINT consumer_subscriptions_pkey DO NOTHING;

DROP FUNCTION queen.pop(text, text, text, text, text, boolean, text, timestamptz, boolean,
                        integer, integer, boolean, integer, integer, text, bigint[], float8,
                        integer);
ALTER TYPE queen.pop_queue ADD ATTRIBUTE conflation boolean;  -- the group's stored policy

-- A row of a pop's answer: queen.pop_row, its queue's effective conflation policy and the
-- width (partitions wanted) the pop used.
CREATE TYPE queen.pop_answer AS (
    queue_id     bigint,
    queue        text,
    partition_id bigint,
    partition    text,
    span_start   bigint,
    span_end     bigint,
    retry_count  integer,
    base_offset  bigint,
    created_at   timestamptz,
    blob         bytea,
    last_offset  bigint,
    conflation   boolean,
    width        integer);

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

CREATE FUNCTION queen.pop(
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

-- queen.pop_shared (version 27) with queen.pop's new arguments and answer columns: the
-- same loop over shares.
DROP FUNCTION queen.pop_shared(text, text, text, text, text, boolean, text, timestamptz,
                               boolean, integer, integer, boolean, integer, integer, text[],
                               bigint[], float8[], integer);
CREATE FUNCTION queen.pop_shared(
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


DROP FUNCTION queen.ack(text[], bigint[], text[], text[], text[], text[], bigint[], boolean,
                        text, boolean);
CREATE FUNCTION queen.ack(
    p_groups text[], p_partition_ids bigint[], p_txids text[], p_statuses text[],
    p_lease_ids text[], p_errors text[], p_offsets bigint[], p_lease_from_cursor boolean,
    p_default_lease text, p_scan_missing boolean)
RETURNS TABLE (idx integer, outcome text, error text, lease_released boolean, dlq boolean,
               queue_id bigint, partition_id bigint, scan_from bigint, scan_to bigint,
               conflated bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    -- answers per item
    o_idx      integer[] := '{}';
    o_outcome  text[] := '{}';
    o_error    text[] := '{}';
    o_released boolean[] := '{}';
    o_dlq      boolean[] := '{}';
    o_conflated bigint[] := '{}';
    -- items whose address must be searched by the caller
    m_idx      integer[] := '{}';
    m_from     bigint[] := '{}';
    m_to       bigint[] := '{}';
    -- cursor updates
    u_pid      bigint[] := '{}';
    u_group    text[] := '{}';
    u_committed bigint[] := '{}';
    u_retries  integer[] := '{}';
    u_release  boolean[] := '{}';
    u_done     bigint[] := '{}';
    u_after    timestamptz[] := '{}';
    -- dead letters
    d_pid      bigint[] := '{}';
    d_group    text[] := '{}';
    d_offset   bigint[] := '{}';
    d_txid     text[] := '{}';
    d_error    text[] := '{}';
    d_retries  integer[] := '{}';
    -- wake-ups
    w_qid      bigint[] := '{}';
    w_pid      bigint[] := '{}';
    -- the (group, partition) being decided
    k          record;        -- its cursor, from its first item
    v_open     boolean := false;
    v_close    boolean := false;
    v_valid    integer[];     -- items that take effect
    v_top      bigint;        -- highest completed offset
    s_offset   bigint;        -- lowest signal: offset, rank, item
    s_rank     integer;
    s_idx      integer;
    s_status   text;
    s_error    text;
    s_txid     text;
    v_new      bigint;
    v_retries  integer;
    v_release  boolean;
    v_delay    boolean;
    v_dlq_idx  integer;
    v_lease    text;
    v_rank     integer;
    v_base     bigint;
    v_skipped  bigint;        -- superseded messages a conflated lease's commit retired
    v_item     integer;
    r          record;
BEGIN
    -- Lock first, in one global order; the reads below then see the locked rows.
    PERFORM 1
       FROM queen.log_consumers c
       JOIN (SELECT DISTINCT g, p FROM unnest(p_groups, p_partition_ids) AS u(g, p)) w
         ON c.consumer_group = w.g AND c.partition_id = w.p
      ORDER BY c.consumer_group, c.partition_id
        FOR UPDATE OF c;

    FOR r IN
        SELECT false AS sentinel, u.ord::integer AS item, u.grp, u.pid, u.txid, u.status,
               u.lease, u.err, c.partition_id IS NOT NULL AS known, c.committed, c.batch_end,
               c.worker_id, c.retry_count,
               (c.worker_id IS NOT NULL AND c.lease_expires_at > now()) AS lease_live,
               p.last_offset, p.queue_id AS qid, coalesce(sub.conflation, false) AS conflating,
               (q.options ->> 'retryLimit')::integer AS retry_limit,
               (q.options ->> 'retryDelay')::integer AS retry_delay,
               ((q.options ->> 'deadLetterQueue')::boolean
                OR (q.options ->> 'dlqAfterMaxRetries')::boolean) AS dlq_on,
               -- The earliest occurrence above the cursor, else the latest at or below it
               -- (an already committed message).
               coalesce(u.given,
                        (SELECT min(i.msg_offset) FROM queen.log_txn_index i
                          WHERE i.partition_id = u.pid AND i.txn_key = t.key
                            AND i.msg_offset > c.committed),
                        (SELECT max(i.msg_offset) FROM queen.log_txn_index i
                          WHERE i.partition_id = u.pid AND i.txn_key = t.key
                            AND i.msg_offset <= c.committed)) AS off
          FROM unnest(p_groups, p_partition_ids, p_txids, p_statuses, p_lease_ids, p_errors,
                      p_offsets) WITH ORDINALITY AS u(grp, pid, txid, status, lease, err, given, ord)
          CROSS JOIN LATERAL (SELECT queen.txn_key(u.txid) AS key) t
          LEFT JOIN queen.log_consumers c ON c.partition_id = u.pid AND c.consumer_group = u.grp
          LEFT JOIN queen.log_partitions p ON p.id = u.pid
          LEFT JOIN queen.queues q ON q.id = p.queue_id
          LEFT JOIN queen.consumer_subscriptions sub
            ON sub.queue_id = p.queue_id AND sub.consumer_group = u.grp
        UNION ALL  -- closes the last (group, partition)
        SELECT true, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
               NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        ORDER BY 1, 3, 4, 2
    LOOP
        -- Decide the previous (group, partition) once its items are all seen.
        -- (k is read only once it holds a cursor: PL/pgSQL does not short-circuit AND.)
        IF v_open THEN
            v_close := r.sentinel OR r.grp <> k.grp OR r.pid <> k.pid;
        END IF;
        IF v_close THEN
            IF cardinality(v_valid) > 0 THEN
                v_top := coalesce(v_top, k.committed);
                v_new := greatest(k.committed, CASE WHEN s_offset IS NULL THEN v_top
                                                    ELSE least(v_top, s_offset - 1) END);
                -- The retry counter belongs to the head of the span.
                v_retries := CASE WHEN v_new = k.committed THEN k.retry_count ELSE 0 END;
                v_release := false;
                v_delay := false;
                v_dlq_idx := NULL;
                IF s_offset IS NOT NULL THEN
                    v_release := true;
                    -- A failed or retried span is claimable again after retryDelay (unless
                    -- it is dead-lettered or dropped below): a poison message must not spin.
                    v_delay := s_status IN ('failed', 'retry') AND k.retry_delay > 0;
                    -- The signal is at the head: it acts now. Under conflation the delivered
                    -- message is the lease's tail, with only superseded ones before it: a
                    -- signal on it acts as at the head (extensions §20.3).
                    IF s_offset = v_new + 1
                       OR (k.conflating AND v_new = k.committed AND s_offset = k.batch_end) THEN
                        IF s_status = 'dlq'
                           OR (s_status = 'failed' AND v_retries >= k.retry_limit) THEN
                            IF k.dlq_on THEN
                                d_pid := d_pid || k.pid;
                                d_group := d_group || k.grp;
                                d_offset := d_offset || s_offset;
                                d_txid := d_txid || s_txid;
                                d_error := d_error || coalesce(nullif(s_error, ''),
                                                               'Retries exhausted');
                                d_retries := d_retries || v_retries;
                                v_dlq_idx := s_idx;
                            END IF;
                            v_new := s_offset;
                            v_retries := 0;
                            v_delay := false;
                        ELSIF s_status = 'failed' THEN
                            v_retries := v_retries + 1;
                        END IF;
                    END IF;
                ELSIF k.batch_end IS NOT NULL AND v_new >= k.batch_end THEN
                    v_release := true;
                END IF;
                v_skipped := CASE WHEN k.conflating AND s_offset IS NULL AND v_new > k.committed
                                  THEN v_new - k.committed - 1 END;
                FOREACH v_item IN ARRAY v_valid LOOP
                    o_idx := o_idx || v_item;
                    o_outcome := o_outcome || 'ok'::text;
                    o_error := o_error || NULL::text;
                    o_released := o_released || (v_release AND k.worker_id IS NOT NULL);
                    o_dlq := o_dlq || coalesce(v_item = v_dlq_idx, false);
                    o_conflated := o_conflated || v_skipped;
                END LOOP;
                u_pid := u_pid || k.pid;
                u_group := u_group || k.grp;
                u_committed := u_committed || v_new;
                u_retries := u_retries || v_retries;
                u_release := u_release || v_release;
                u_done := u_done || (v_new - k.committed);
                u_after := u_after || CASE WHEN v_delay
                    THEN now() + make_interval(secs => k.retry_delay / 1000.0) END;
                -- A delayed span wakes nobody: parked pops find it on a re-check.
                IF v_release AND NOT v_delay AND v_new < k.last_offset THEN
                    w_qid := w_qid || k.qid;
                    w_pid := w_pid || k.pid;
                END IF;
            END IF;
            v_open := false;
            v_close := false;
        END IF;
        EXIT WHEN r.sentinel;

        IF NOT v_open THEN
            k := r;
            v_open := true;
            v_valid := '{}';
            v_top := NULL;
            s_offset := NULL;
            s_rank := NULL;
            s_idx := NULL;
        END IF;

        v_lease := r.lease;
        IF v_lease IS NULL AND p_lease_from_cursor THEN
            v_lease := coalesce(r.worker_id, p_default_lease);
        END IF;
        IF NOT r.known THEN
            o_idx := o_idx || r.item;
            o_outcome := o_outcome || 'refused'::text;
            o_error := o_error || 'consumer not found'::text;
            o_released := o_released || false;
            o_dlq := o_dlq || false;
            o_conflated := o_conflated || NULL::bigint;
        ELSIF r.off IS NULL AND p_scan_missing THEN
            m_idx := m_idx || r.item;
            m_from := m_from || (r.committed + 1);
            m_to := m_to || r.last_offset;
        ELSIF r.off IS NULL
              OR (v_lease IS NOT NULL
                  AND (v_lease IS DISTINCT FROM r.worker_id OR NOT r.lease_live))
              OR (r.off <= r.committed AND r.status <> 'completed') THEN
            o_idx := o_idx || r.item;
            o_outcome := o_outcome || 'refused'::text;
            o_error := o_error || CASE
                WHEN r.off IS NULL THEN 'Message not found'
                WHEN r.off > r.committed THEN 'invalid or expired lease'
                WHEN v_lease IS NOT NULL
                     AND (v_lease IS DISTINCT FROM r.worker_id OR NOT r.lease_live)
                    THEN 'invalid or expired lease'
                ELSE format('already committed (offset %s <= cursor %s)', r.off, r.committed)
                END;
            o_released := o_released || false;
            o_dlq := o_dlq || false;
            o_conflated := o_conflated || NULL::bigint;
        ELSIF r.off <= r.committed THEN  -- completed, already: nothing to do
            o_idx := o_idx || r.item;
            o_outcome := o_outcome || 'noop'::text;
            o_error := o_error || NULL::text;
            o_released := o_released || false;
            o_dlq := o_dlq || false;
            o_conflated := o_conflated || NULL::bigint;
        ELSE
            v_valid := v_valid || r.item;
            IF r.status = 'completed' THEN
                v_top := greatest(v_top, r.off);
            ELSE
                v_rank := CASE r.status WHEN 'dlq' THEN 0 WHEN 'failed' THEN 1 ELSE 2 END;
                IF s_offset IS NULL OR (r.off, v_rank, r.item) < (s_offset, s_rank, s_idx) THEN
                    s_offset := r.off;
                    s_rank := v_rank;
                    s_idx := r.item;
                    s_status := r.status;
                    s_error := r.err;
                    s_txid := r.txid;
                END IF;
            END IF;
        END IF;
    END LOOP;

    IF cardinality(m_idx) > 0 THEN  -- decided nothing: the caller searches and calls again
        RETURN QUERY SELECT m.i, 'missing'::text, NULL::text, false, false, NULL::bigint,
                            NULL::bigint, m.lo, m.hi, NULL::bigint
                       FROM unnest(m_idx, m_from, m_to) AS m(i, lo, hi);
        RETURN;
    END IF;

    FOR i IN 1 .. cardinality(d_pid) LOOP
        SELECT s.base_offset INTO v_base FROM queen.log_segments s
         WHERE s.partition_id = d_pid[i] AND s.base_offset <= d_offset[i]
           AND s.last_offset >= d_offset[i];
        CONTINUE WHEN NOT FOUND;  -- retention removed it meanwhile: nothing left to copy
        -- DO UPDATE (not DO NOTHING) locks an existing copy until this commits, so a
        -- concurrent removal of the copy's last other dead letter waits and then sees ours
        -- (queries_dlq.sql: dlq_lock_copies).
        INSERT INTO queen.log_dlq_segments AS x (partition_id, base_offset, created_at, blob)
        SELECT s.partition_id, s.base_offset, s.created_at, s.blob FROM queen.log_segments s
         WHERE s.partition_id = d_pid[i] AND s.base_offset = v_base
        ON CONFLICT ON CONSTRAINT log_dlq_segments_pkey
        DO UPDATE SET created_at = x.created_at;
        INSERT INTO queen.log_dlq (partition_id, consumer_group, msg_offset, transaction_id,
                                   segment_base, error_message, retry_count, created_at)
        SELECT d_pid[i], d_group[i], d_offset[i], d_txid[i], v_base, d_error[i],
               d_retries[i], s.created_at
          FROM queen.log_dlq_segments s
         WHERE s.partition_id = d_pid[i] AND s.base_offset = v_base;
    END LOOP;

    UPDATE queen.log_consumers c
       SET committed = w.committed,
           retry_count = w.retries,
           batch_end = CASE WHEN w.release THEN NULL ELSE c.batch_end END,
           worker_id = CASE WHEN w.release THEN NULL ELSE c.worker_id END,
           lease_expires_at = CASE WHEN w.release THEN NULL ELSE c.lease_expires_at END,
           total_consumed = c.total_consumed + w.done,
           last_consumed_at = CASE WHEN w.done > 0 THEN now() ELSE c.last_consumed_at END,
           not_before = w.after
      FROM unnest(u_pid, u_group, u_committed, u_retries, u_release, u_done, u_after)
           AS w(pid, grp, committed, retries, release, done, after)
     WHERE c.partition_id = w.pid AND c.consumer_group = w.grp;

    RETURN QUERY
    SELECT o.i, o.outcome, o.err, o.released, o.dead, NULL::bigint, NULL::bigint,
           NULL::bigint, NULL::bigint, o.skipped
      FROM unnest(o_idx, o_outcome, o_error, o_released, o_dlq, o_conflated)
           AS o(i, outcome, err, released, dead, skipped)
    UNION ALL
    SELECT NULL, 'wake', NULL, NULL, NULL, w.qid, w.pid, NULL, NULL, NULL
      FROM unnest(w_qid, w_pid) AS w(qid, pid);
END $$;
