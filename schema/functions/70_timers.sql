-- Timers (wire-protocol-extensions §16; table queen.timers, migration 075): applying a
-- call's ops, and a timer that failed for good as a dead letter.

-- Apply one call's timer ops (§16.2) in the caller's transaction, in the order given (the
-- caller sorts them by (queue, timer_key) bytes, so concurrent calls lock rows in one
-- order), at one instant. One row per op, in that order:
--   status   scheduled | rescheduled | cancelled | absent
--   txn      for a schedule its own; for a cancel the stored one (null when absent)
--   deliver_at
-- A row a fire holds is waited for (the fire deletes it): a cancel then answers absent, a
-- schedule a fresh `scheduled`; so this never answers too_late.
-- $: p_tenant (the caller's: every op names a queue of it), p_now, then per op:
--    is_cancel, queue, key, partition, delay_ms, txn, message_id, payload, payload_zstd,
--    encrypted, sealed; p_sub the scheduler.
CREATE OR REPLACE FUNCTION queen.timers_apply(
    p_tenant text, p_now timestamptz, p_cancel boolean[], p_queue text[], p_key text[], p_partition text[],
    p_delay_ms bigint[], p_txn text[], p_message_id uuid[], p_payload bytea[],
    p_zstd boolean[], p_encrypted boolean[], p_sealed boolean[], p_sub text)
RETURNS TABLE (status text, txn text, deliver_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    stored text;
    due timestamptz;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_queue, 1), 0) LOOP
        IF p_cancel[i] THEN
            DELETE FROM queen.timers t
             WHERE t.tenant = p_tenant AND t.queue = p_queue[i] AND t.timer_key = p_key[i]
            RETURNING t.txn INTO stored;
            status := CASE WHEN FOUND THEN 'cancelled' ELSE 'absent' END;
            txn := CASE WHEN FOUND THEN stored ELSE p_txn[i] END;
            deliver_at := NULL;
        ELSE
            PERFORM 1 FROM queen.timers t
             WHERE t.tenant = p_tenant AND t.queue = p_queue[i] AND t.timer_key = p_key[i]
               FOR UPDATE;
            status := CASE WHEN FOUND THEN 'rescheduled' ELSE 'scheduled' END;
            due := p_now + p_delay_ms[i] * interval '1 millisecond';
            INSERT INTO queen.timers AS t (tenant, queue, timer_key, partition, deliver_at, fire_at,
                                           txn, message_id, payload, payload_zstd, encrypted,
                                           sealed, producer_sub, attempts, last_error,
                                           created_at, updated_at)
            VALUES (p_tenant, p_queue[i], p_key[i], p_partition[i], due, due, p_txn[i],
                    p_message_id[i], p_payload[i], p_zstd[i], p_encrypted[i], p_sealed[i],
                    p_sub, 0, NULL, p_now, p_now)
            ON CONFLICT (tenant, queue, timer_key) DO UPDATE
               SET partition = EXCLUDED.partition, deliver_at = EXCLUDED.deliver_at,
                   fire_at = EXCLUDED.fire_at, txn = EXCLUDED.txn,
                   message_id = EXCLUDED.message_id, payload = EXCLUDED.payload,
                   payload_zstd = EXCLUDED.payload_zstd, encrypted = EXCLUDED.encrypted,
                   sealed = EXCLUDED.sealed, producer_sub = EXCLUDED.producer_sub,
                   attempts = 0, last_error = NULL,
                   updated_at = EXCLUDED.updated_at;
            txn := p_txn[i];
            deliver_at := due;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- A timer that failed for good, as a dead letter of its destination partition (§16.4):
-- group `__timer__`, offset -1, the message id and txn, the error and attempts, the payload
-- as the DLQ shows it. The queue and partition (of p_tenant) are created as a push would
-- create them.
CREATE OR REPLACE FUNCTION queen.timer_dead_letter(
    p_tenant text, p_queue text, p_partition text, p_namespace text, p_task text, p_options jsonb,
    p_txn text, p_message_id uuid, p_sub text, p_payload bytea, p_error text,
    p_attempts integer, p_created_at timestamptz)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_queue bigint;
    v_partition bigint;
BEGIN
    SELECT x.queue_id, x.partition_id INTO v_queue, v_partition
      FROM queen.partition_ids(ARRAY[p_tenant], ARRAY[p_queue], ARRAY[p_partition],
                               ARRAY[p_namespace], ARRAY[p_task], p_options) x;
    INSERT INTO queen.log_dlq (partition_id, consumer_group, msg_offset, transaction_id,
                               message_id, producer_sub, payload, error_message, retry_count,
                               created_at)
    VALUES (v_partition, '__timer__', -1, p_txn, p_message_id, p_sub, p_payload, p_error,
            p_attempts, p_created_at);
    RETURN v_partition;
END;
$$;

-- Whether a fire holds a timer's row now (timers_peek, timers_page): a fire locks the rows
-- it takes FOR UPDATE, and this weakest lock is refused by that one only. A row gone since
-- the caller read it (fired) counts as held.
CREATE OR REPLACE FUNCTION queen.timer_claimed(p_tenant text, p_queue text, p_key text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RETURN NOT EXISTS (SELECT 1 FROM queen.timers f
                        WHERE f.tenant = p_tenant AND f.queue = p_queue
                          AND f.timer_key = p_key
                          FOR KEY SHARE SKIP LOCKED);
END;
$$;
