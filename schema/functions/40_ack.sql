-- Acks: an ack call is one statement.
--
-- queen.ack applies the acks of one call (any groups, any partitions) as one statement, so
-- the call is atomic and costs one round trip: lock the cursors in (group, partition)
-- order (a fixed order, so concurrent acks cannot deadlock), resolve each transactionId to
-- its offset, apply the offset-commit rules (wire-protocol §4.5; docs/acks.md) per (group,
-- partition), dead-letter, and release leases. Nothing is written before every item is
-- decided, so a call that must first have its caller search the segments changes nothing
-- (see p_scan_missing).
--
-- The rules per (group, partition): `completed` at offset N commits N and everything before
-- it; with mixed outcomes the cursor is clamped just below the lowest signal (at equal
-- offsets dlq beats failed beats retry); `failed` spends the retry budget of the head and
-- then dead-letters (or drops, with the DLQ off); `dlq` dead-letters at once; `retry`
-- releases without spending budget; a failed or retried span is claimable again only after
-- the queue's retryDelay; a leaseId that is not the live holder's moves nothing. A signal
-- above offsets nobody acknowledged only releases the lease: the message is dead-lettered
-- once it is at the head, so nothing before it is ever skipped. Under conflation (the
-- group's stored policy, extensions §20.3) the delivered message is the lease's tail with
-- only superseded ones before it: a signal on it acts as at the head, and a completed ack
-- reports the superseded messages its commit retired (`conflated`).
--
-- Resolution: an ack's transactionId names the earliest occurrence of that id above the
-- cursor (a queue with dedupWindowSeconds 0 may store an id more than once), else the
-- latest one at or below it (an already committed message); only offsets the partition
-- still retains (from log_start) count. The index answers this alone while it is complete
-- for the offsets in question. Once the reaper pruned rows, an earlier occurrence may sit in
-- a pruned span: `log_txn_pruned` (migration 095) records, per partition, an offset below
-- which every pruned row lay, and queen.ack asks its caller to search the segments
-- (core/engine/ack.py) exactly where an earlier occurrence can hide: from the cursor up to
-- the index's answer, and never above that mark. A partition the reaper never pruned is
-- never searched. An id that resolves to nothing is refused, whatever the status, with
-- Queen's text `unresolvable: ...`: nothing is charged or written, and the lease it names
-- is neither released nor shortened.
--
-- A dead letter records the transactionId, the error and the base offset of the segment
-- holding the message, whose blob is copied (once per segment) into log_dlq_segments; the
-- frame is extracted when the dead letter is read (migration 023).
--
-- Every statement below that reads or writes a partition's rows names one partition id: on
-- Citus the call runs on the node of the shard its partitions live on (`p_route`: the broker
-- groups a flush's acks by shard, core/engine/batching/acks.py), and each statement then reads
-- and writes that node's rows only (docs/deploying/citus.md).
--
-- The function runs its statements with generic plans (planned once per connection) and
-- without sequential scans: re-planning them at each call, PL/pgSQL's default while their
-- parameters vary, cost more than running them, and a generic plan's guesses about array
-- arguments must never turn into a scan of a table that is small in live rows but large in
-- dead versions (cursors are updated all the time).

-- Arguments: p_route, on Citus a number of the shard every item's partition lives on (Citus
-- runs the call on that shard's node: core/storage/shards.py; null: no shard in particular);
-- then one entry per item (1-based positions are the items' `idx`):
--   p_groups, p_partition_ids, p_txids   the address of each ack
--   p_statuses     completed | failed | retry | dlq
--   p_lease_ids    the lease the item is checked against, or null (no lease check)
--   p_errors       the error text a failed/dlq item carries, or null
--   p_offsets      the offset a segment search found, or null (use the index)
--   p_tenants      the tenant of the caller of each item (migration 140): an item naming a
--                  partition of another tenant's queue is answered as one naming a
--                  partition without this group's cursor (null: the default tenant)
-- and for the call:
--   p_scan_missing an item the index cannot settle on its own makes the call change
--                  nothing and answer `missing` with the span the caller should search;
--                  false: settle with the index's answer (null: unresolvable)
-- Rows: one per item (idx, outcome ok | noop | refused | missing, error, lease_released,
-- dlq; scan_from/scan_to for missing; conflated), then one `wake` row per (queue,
-- partition) where a span became claimable again.
CREATE OR REPLACE FUNCTION queen.ack(
    p_route bigint, p_groups text[], p_partition_ids bigint[], p_txids text[], p_statuses text[],
    p_lease_ids text[], p_errors text[], p_offsets bigint[], p_scan_missing boolean,
    p_tenants text[])
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
    -- the (group, partition) being decided, read when its first item comes
    k_grp      text;
    k_pid      bigint;
    kc         record;        -- its cursor
    k_known    boolean;       -- it has one
    k_live     boolean;       -- with a live lease
    kp         record;        -- its partition's head
    kq         record;        -- its queue's options and the group's conflation policy
    k_pruned   bigint;        -- the index's pruning mark (log_txn_pruned), null: none
    -- every item's key, in the order the loop reads items, and the size of its (group,
    -- partition): a (group, partition)'s items are resolved together when its first comes
    b_keys     uuid[];
    b_sizes    integer[];
    v_keys     uuid[];
    a_above    bigint[];      -- per item of the (group, partition): the index's answers
    a_under    bigint[];
    v_n        integer := 0;  -- the item's place in that order
    v_first    integer;       -- the (group, partition)'s first item's
    -- the item being read
    v_above    bigint;
    v_under    bigint;
    v_off      bigint;
    v_scan_from bigint;
    v_scan_to  bigint;
    v_pid      bigint;
    v_grp      text;
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
    v_rank     integer;
    v_base     bigint;
    v_skipped  bigint;        -- superseded messages a conflated lease's commit retired
    v_item     integer;
    v_stale    boolean;       -- the item names a lease that is not the live holder's
    v_at       timestamptz;
    v_stamp    timestamptz;
    r          record;
BEGIN
    -- Lock first, in one global order; the reads below then see the locked rows. Every
    -- cursor here is read by its primary key, one at a time: a join of the items with the
    -- cursors lets a generic plan read every cursor of the group through its group index,
    -- a cost that grows with the partitions the group has ever read.
    FOR r IN SELECT DISTINCT u.g, u.p FROM unnest(p_groups, p_partition_ids) AS u(g, p)
              ORDER BY u.g, u.p LOOP
        v_pid := r.p;
        v_grp := r.g;
        -- On Citus, before the first read: the cursor is read and written on one copy of
        -- its shard, a move in between or not (90_distribution.sql, queen.hold_placement).
        PERFORM queen.hold_placement(v_pid);
        PERFORM 1 FROM queen.log_consumers c
         WHERE c.consumer_group = v_grp AND c.partition_id = v_pid
           FOR UPDATE;
    END LOOP;

    -- The keys in the order of the loop below (group, partition, item), each with its
    -- (group, partition)'s size.
    SELECT array_agg(queen.txn_key(u.txid) ORDER BY u.grp, u.pid, u.ord),
           array_agg(u.size ORDER BY u.grp, u.pid, u.ord)
      INTO b_keys, b_sizes
      FROM (SELECT t.grp, t.pid, t.txid, t.ord,
                   count(*) OVER (PARTITION BY t.grp, t.pid)::integer AS size
              FROM unnest(p_groups, p_partition_ids, p_txids)
                   WITH ORDINALITY AS t(grp, pid, txid, ord)) u;

    FOR r IN
        SELECT false AS sentinel, u.ord::integer AS item, u.grp, u.pid, u.txid, u.status,
               u.lease, u.err, u.given, u.tenant
          FROM unnest(p_groups, p_partition_ids, p_txids, p_statuses, p_lease_ids, p_errors,
                      p_offsets, p_tenants)
                      WITH ORDINALITY AS u(grp, pid, txid, status, lease, err, given, tenant, ord)
        UNION ALL  -- closes the last (group, partition)
        SELECT true, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        ORDER BY 1, 3, 4, 2
    LOOP
        -- Decide the previous (group, partition) once its items are all seen.
        -- (k_* are read only once they are set: PL/pgSQL does not short-circuit AND.)
        IF v_open THEN
            v_close := r.sentinel OR r.grp <> k_grp OR r.pid <> k_pid;
        END IF;
        IF v_close THEN
            IF cardinality(v_valid) > 0 THEN
                v_top := coalesce(v_top, kc.committed);
                v_new := greatest(kc.committed, CASE WHEN s_offset IS NULL THEN v_top
                                                    ELSE least(v_top, s_offset - 1) END);
                -- The retry counter belongs to the head of the span.
                v_retries := CASE WHEN v_new = kc.committed THEN kc.retry_count ELSE 0 END;
                v_release := false;
                v_delay := false;
                v_dlq_idx := NULL;
                IF s_offset IS NOT NULL THEN
                    v_release := true;
                    -- A failed or retried span is claimable again after retryDelay (unless
                    -- it is dead-lettered or dropped below): a poison message must not spin.
                    v_delay := s_status IN ('failed', 'retry') AND kq.retry_delay > 0;
                    -- The signal is at the head: it acts now. Under conflation the delivered
                    -- message is the lease's tail, with only superseded ones before it: a
                    -- signal on it acts as at the head (extensions §20.3).
                    IF s_offset = v_new + 1
                       OR (kq.conflating AND v_new = kc.committed AND s_offset = kc.batch_end) THEN
                        IF s_status = 'dlq'
                           OR (s_status = 'failed' AND v_retries >= kq.retry_limit) THEN
                            IF kq.dlq_on THEN
                                d_pid := d_pid || k_pid;
                                d_group := d_group || k_grp;
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
                ELSIF kc.batch_end IS NOT NULL AND v_new >= kc.batch_end THEN
                    v_release := true;
                END IF;
                v_skipped := CASE WHEN kq.conflating AND s_offset IS NULL AND v_new > kc.committed
                                  THEN v_new - kc.committed - 1 END;
                FOREACH v_item IN ARRAY v_valid LOOP
                    o_idx := o_idx || v_item;
                    o_outcome := o_outcome || 'ok'::text;
                    o_error := o_error || NULL::text;
                    o_released := o_released || (v_release AND kc.worker_id IS NOT NULL);
                    o_dlq := o_dlq || coalesce(v_item = v_dlq_idx, false);
                    o_conflated := o_conflated || v_skipped;
                END LOOP;
                u_pid := u_pid || k_pid;
                u_group := u_group || k_grp;
                u_committed := u_committed || v_new;
                u_retries := u_retries || v_retries;
                u_release := u_release || v_release;
                u_done := u_done || (v_new - kc.committed);
                u_after := u_after || CASE WHEN v_delay
                    THEN now() + make_interval(secs => kq.retry_delay / 1000.0) END;
                -- A released span is announced even while a retryDelay holds it: the
                -- processes that heard of its claim must learn the lease is gone, and a
                -- claim tells them until when the delay holds it (verdict `later`).
                IF v_release AND v_new < kp.last_offset THEN
                    w_qid := w_qid || kp.queue_id;
                    w_pid := w_pid || k_pid;
                END IF;
            END IF;
            v_open := false;
            v_close := false;
        END IF;
        EXIT WHEN r.sentinel;
        v_n := v_n + 1;

        IF NOT v_open THEN
            -- A (group, partition)'s first item: its cursor, head, queue options and
            -- pruning mark, each by its key.
            k_grp := r.grp;
            k_pid := r.pid;
            v_pid := r.pid;
            v_grp := r.grp;
            SELECT c.* INTO kc FROM queen.log_consumers c
             WHERE c.partition_id = v_pid AND c.consumer_group = v_grp;
            k_known := FOUND;
            k_live := kc.worker_id IS NOT NULL AND kc.lease_expires_at > now();
            SELECT p.queue_id, p.last_offset, p.log_start INTO kp
              FROM queen.log_partitions p WHERE p.id = v_pid;
            SELECT coalesce(sub.conflation, false) AS conflating,
                   (q.options ->> 'retryLimit')::integer AS retry_limit,
                   (q.options ->> 'retryDelay')::integer AS retry_delay,
                   ((q.options ->> 'deadLetterQueue')::boolean
                    OR (q.options ->> 'dlqAfterMaxRetries')::boolean) AS dlq_on,
                   q.tenant
              INTO kq
              FROM queen.queues q
              LEFT JOIN queen.consumer_subscriptions sub
                ON sub.queue_id = q.id AND sub.consumer_group = v_grp
             WHERE q.id = kp.queue_id;
            SELECT pr.below INTO k_pruned FROM queen.log_txn_pruned pr
             WHERE pr.partition_id = v_pid;
            -- The one resolution rule (see the header), for all its items in one statement:
            -- what the index says, and the span where the segments may still hold an
            -- earlier occurrence than its answer. The latest occurrence at or below the
            -- cursor is looked up only when none is above. (One statement per item cost
            -- PostgreSQL more than the lookups it ran.)
            v_first := v_n;
            a_above := NULL;
            a_under := NULL;
            IF k_known THEN
                v_keys := b_keys[v_n : v_n + b_sizes[v_n] - 1];
                SELECT array_agg(h.above ORDER BY k.n), array_agg(h.under ORDER BY k.n)
                  INTO a_above, a_under
                  FROM unnest(v_keys) WITH ORDINALITY AS k(key, n)
                  LEFT JOIN LATERAL (
                        SELECT x.above,
                               CASE WHEN x.above IS NULL THEN
                                   (SELECT max(i.msg_offset) FROM queen.log_txn_index i
                                     WHERE i.partition_id = v_pid AND i.txn_key = k.key
                                       AND i.msg_offset <= kc.committed
                                       AND i.msg_offset >= kp.log_start) END AS under
                          FROM (SELECT (SELECT min(i.msg_offset) FROM queen.log_txn_index i
                                         WHERE i.partition_id = v_pid AND i.txn_key = k.key
                                           AND i.msg_offset > kc.committed
                                           AND i.msg_offset >= kp.log_start) AS above
                                OFFSET 0) x) h ON true;
            END IF;
            v_open := true;
            v_valid := '{}';
            v_top := NULL;
            s_offset := NULL;
            s_rank := NULL;
            s_idx := NULL;
        END IF;

        -- The index's answers for this item (read when its (group, partition) opened).
        v_above := a_above[v_n - v_first + 1];
        v_under := a_under[v_n - v_first + 1];
        v_off := coalesce(r.given, v_above, v_under);
        v_scan_from := greatest(kc.committed + 1, kp.log_start);
        v_scan_to := least(coalesce(v_above - 1, kp.last_offset), coalesce(k_pruned, 0) - 1);

        v_stale := r.lease IS NOT NULL
                   AND (r.lease IS DISTINCT FROM kc.worker_id OR NOT coalesce(k_live, false));
        IF NOT k_known OR coalesce(r.tenant, '') IS DISTINCT FROM kq.tenant THEN
            o_idx := o_idx || r.item;
            o_outcome := o_outcome || 'refused'::text;
            o_error := o_error || 'consumer not found'::text;
            o_released := o_released || false;
            o_dlq := o_dlq || false;
            o_conflated := o_conflated || NULL::bigint;
        ELSIF p_scan_missing AND v_scan_to >= v_scan_from THEN
            m_idx := m_idx || r.item;
            m_from := m_from || v_scan_from;
            m_to := m_to || v_scan_to;
        ELSIF v_off IS NULL OR v_stale OR (v_off <= kc.committed AND r.status <> 'completed') THEN
            -- Refused: nothing of it is applied, and the lease it names is left as it is.
            o_idx := o_idx || r.item;
            o_outcome := o_outcome || 'refused'::text;
            o_error := o_error || CASE
                WHEN v_off IS NULL THEN 'unresolvable: transaction not in the ack window '
                    '(hash purged or never pushed); if leased, the message redelivers'
                WHEN v_stale THEN 'invalid or expired lease'
                ELSE format('already committed (offset %s <= cursor %s)', v_off, kc.committed)
                END;
            o_released := o_released || false;
            o_dlq := o_dlq || false;
            o_conflated := o_conflated || NULL::bigint;
        ELSIF v_off <= kc.committed THEN  -- completed, already: nothing to do
            o_idx := o_idx || r.item;
            o_outcome := o_outcome || 'noop'::text;
            o_error := o_error || NULL::text;
            o_released := o_released || false;
            o_dlq := o_dlq || false;
            o_conflated := o_conflated || NULL::bigint;
        ELSE
            v_valid := v_valid || r.item;
            IF r.status = 'completed' THEN
                v_top := greatest(v_top, v_off);
            ELSE
                v_rank := CASE r.status WHEN 'dlq' THEN 0 WHEN 'failed' THEN 1 ELSE 2 END;
                IF s_offset IS NULL OR (v_off, v_rank, r.item) < (s_offset, s_rank, s_idx) THEN
                    s_offset := v_off;
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

    -- Plain variables, no array elements, in statements on distributed tables: Citus 13.2
    -- crashes on an element of an array argument there (local execution).
    FOR i IN 1 .. cardinality(d_pid) LOOP
        v_pid := d_pid[i];
        v_grp := d_group[i];
        v_off := d_offset[i];
        s_txid := d_txid[i];
        s_error := d_error[i];
        v_retries := d_retries[i];
        SELECT s.base_offset, s.created_at, s.blob INTO r FROM queen.log_segments s
         WHERE s.partition_id = v_pid AND s.base_offset <= v_off AND s.last_offset >= v_off;
        CONTINUE WHEN NOT FOUND;  -- retention removed it meanwhile: nothing left to copy
        -- DO UPDATE (not DO NOTHING) locks an existing copy until this commits, so a
        -- concurrent removal of the copy's last other dead letter waits and then sees ours
        -- (queries_dlq.sql: dlq_lock_copies). The letter takes the copy's append time.
        INSERT INTO queen.log_dlq_segments AS x (partition_id, base_offset, created_at, blob)
        VALUES (v_pid, r.base_offset, r.created_at, r.blob)
        ON CONFLICT ON CONSTRAINT log_dlq_segments_pkey
        DO UPDATE SET created_at = x.created_at
        RETURNING x.created_at INTO v_at;
        INSERT INTO queen.log_dlq (partition_id, consumer_group, msg_offset, transaction_id,
                                   segment_base, error_message, retry_count, created_at)
        VALUES (v_pid, v_grp, v_off, s_txid, r.base_offset, s_error, v_retries, v_at);
    END LOOP;

    FOR i IN 1 .. cardinality(u_pid) LOOP  -- by primary key (see the lock above)
        v_pid := u_pid[i];
        v_grp := u_group[i];
        v_new := u_committed[i];
        v_retries := u_retries[i];
        v_release := u_release[i];
        v_top := u_done[i];
        v_at := u_after[i];
        v_stamp := CASE WHEN v_top > 0 THEN now() END;  -- (Citus: no now() in a CASE here)
        UPDATE queen.log_consumers c
           SET committed = v_new,
               retry_count = v_retries,
               batch_end = CASE WHEN v_release THEN NULL ELSE c.batch_end END,
               worker_id = CASE WHEN v_release THEN NULL ELSE c.worker_id END,
               lease_expires_at = CASE WHEN v_release THEN NULL ELSE c.lease_expires_at END,
               total_consumed = c.total_consumed + v_top,
               last_consumed_at = coalesce(v_stamp, c.last_consumed_at),
               not_before = v_at
         WHERE c.partition_id = v_pid AND c.consumer_group = v_grp;
    END LOOP;

    RETURN QUERY
    SELECT o.i, o.outcome, o.err, o.released, o.dead, NULL::bigint, NULL::bigint,
           NULL::bigint, NULL::bigint, o.skipped
      FROM unnest(o_idx, o_outcome, o_error, o_released, o_dlq, o_conflated)
           AS o(i, outcome, err, released, dead, skipped)
    UNION ALL
    SELECT NULL, 'wake', NULL, NULL, NULL, w.qid, w.pid, NULL, NULL, NULL
      FROM unnest(w_qid, w_pid) AS w(qid, pid);
END $$;

-- The ack of whole deliveries (core/engine/ack_spans.py): each span is what one pop's lease
-- delivered of one partition, every message acknowledged `completed` under that lease, in
-- a call where the process that answered the pop matched the items against the
-- transactionIds it delivered (in delivery order, each once). What queen.ack would decide
-- for such items is then known without resolving them: every delivered id's earliest
-- occurrence above the cursor is its delivered offset (the span starts at the cursor's next
-- offset and holds each id once), so the cursor commits the span's end and the lease is
-- released. What the process cannot know is checked here, under the cursors' locks: the
-- lease is still the live holder's, the cursor has not moved since the pop (committed just
-- below the span, the lease's span ending where this one does), the span is still retained
-- (log_start), the queue is the caller's tenant's, the group does not conflate and no
-- (group, partition) is named twice (a delivery acknowledged twice in one flush). If any
-- span fails a check, nothing is written and every span answers `applied` false: the caller
-- then sends the same items through queen.ack, so a call is applied by one statement or the
-- other, never partly by each. Not used on Citus (queen.ack's routes).
--   p_groups, p_partition_ids, p_lease_ids, p_starts, p_ends, p_tenants   one entry per span
-- Rows: one per span (idx, 1-based; applied; the partition's queue and whether a span past
-- the committed one is claimable now, for the wake-up queen.ack would answer).
CREATE OR REPLACE FUNCTION queen.ack_spans(
    p_groups text[], p_partition_ids bigint[], p_lease_ids text[], p_starts bigint[],
    p_ends bigint[], p_tenants text[])
RETURNS TABLE (idx integer, applied boolean, queue_id bigint, wake boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $$
DECLARE
    v_grp      text;
    v_pid      bigint;
    v_lease    text;
    v_start    bigint;
    v_end      bigint;
    v_tenant   text;
    v_ok       boolean := true;
    v_prev_grp text;          -- the span before, in lock order: a (group, partition) named
    v_prev_pid bigint;        -- twice (the same delivery acknowledged twice in one flush)
    kc         record;
    kp         record;
    -- per span, in idx order: its queue and whether something past it is claimable
    a_qid      bigint[] := array_fill(NULL::bigint, ARRAY[cardinality(p_groups)]);
    a_wake     boolean[] := array_fill(false, ARRAY[cardinality(p_groups)]);
    r          record;
BEGIN
    -- Check every span under its cursor's lock, in queen.ack's lock order (group, partition),
    -- so that concurrent acks of either kind cannot deadlock.
    FOR r IN SELECT u.g, u.p, u.l, u.s, u.e, u.t, u.ord::integer AS item
               FROM unnest(p_groups, p_partition_ids, p_lease_ids, p_starts, p_ends, p_tenants)
                    WITH ORDINALITY AS u(g, p, l, s, e, t, ord)
              ORDER BY u.g, u.p LOOP
        v_grp := r.g;
        v_pid := r.p;
        v_lease := r.l;
        v_start := r.s;
        v_end := r.e;
        v_tenant := r.t;
        -- would pass every check below twice and be counted twice: queen.ack decides that.
        IF v_grp = v_prev_grp AND v_pid = v_prev_pid THEN
            v_ok := false;
            EXIT;
        END IF;
        v_prev_grp := v_grp;
        v_prev_pid := v_pid;
        SELECT c.committed, c.batch_end, c.worker_id, c.lease_expires_at INTO kc
          FROM queen.log_consumers c
         WHERE c.consumer_group = v_grp AND c.partition_id = v_pid
           FOR UPDATE;
        IF NOT FOUND OR kc.worker_id IS DISTINCT FROM v_lease
           OR NOT coalesce(kc.lease_expires_at > now(), false)
           OR kc.committed IS DISTINCT FROM v_start - 1
           OR kc.batch_end IS DISTINCT FROM v_end THEN
            v_ok := false;
            EXIT;
        END IF;
        SELECT p.queue_id, p.last_offset, p.log_start INTO kp
          FROM queen.log_partitions p WHERE p.id = v_pid;
        IF NOT FOUND OR kp.log_start > v_start OR kp.last_offset < v_end
           OR NOT EXISTS (
                SELECT 1 FROM queen.queues q
                  LEFT JOIN queen.consumer_subscriptions sub
                    ON sub.queue_id = q.id AND sub.consumer_group = v_grp
                 WHERE q.id = kp.queue_id AND q.tenant = v_tenant
                   AND NOT coalesce(sub.conflation, false)) THEN
            v_ok := false;
            EXIT;
        END IF;
        a_qid[r.item] := kp.queue_id;
        a_wake[r.item] := v_end < kp.last_offset;
    END LOOP;

    IF v_ok THEN
        -- As queen.ack writes a completed commit that ends the lease's span.
        FOR i IN 1 .. cardinality(p_groups) LOOP
            v_grp := p_groups[i];
            v_pid := p_partition_ids[i];
            v_start := p_starts[i];
            v_end := p_ends[i];
            UPDATE queen.log_consumers c
               SET committed = v_end,
                   retry_count = 0,
                   batch_end = NULL,
                   worker_id = NULL,
                   lease_expires_at = NULL,
                   total_consumed = c.total_consumed + (v_end - v_start + 1),
                   last_consumed_at = now(),
                   not_before = NULL
             WHERE c.partition_id = v_pid AND c.consumer_group = v_grp;
        END LOOP;
    END IF;

    RETURN QUERY
    SELECT s.i::integer, v_ok, CASE WHEN v_ok THEN a_qid[s.i] END, v_ok AND a_wake[s.i]
      FROM generate_series(1, cardinality(p_groups)) AS s(i);
END $$;
