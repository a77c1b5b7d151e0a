-- Version 25: a pop is one statement (queen.pop, schema/functions/30_pop.sql): the cursor
-- state the claim applies, and the types its functions pass around.

-- Cursor state the claim applies: retryDelay's not-before time, maxWaitTimeSeconds' count.
ALTER TABLE queen.log_consumers
    ADD COLUMN not_before timestamptz,              -- the span is claimable from then on
    ADD COLUMN evicted bigint NOT NULL DEFAULT 0;   -- messages skipped by maxWaitTimeSeconds

-- A queue a pop addresses, as the claim needs it.
CREATE TYPE queen.pop_queue AS (
    id            bigint,
    name          text,
    seed_mode     text,          -- first-contact rule for this group: all | new | timestamp
    seed_instant  timestamptz,   -- the instant of a timestamp seed
    lease_seconds integer,       -- lease length of its spans
    delay_seconds integer,       -- delayedProcessing
    window_buffer integer,
    max_wait_seconds integer,    -- maxWaitTimeSeconds
    min_pop_wait_ms integer);    -- minPopWaitTime

-- A row of a pop's answer: a segment of a delivered span (see queen.pop).
CREATE TYPE queen.pop_row AS (
    queue_id     bigint,
    queue        text,
    partition_id bigint,
    partition    text,
    span_start   bigint,        -- first delivered offset of the partition
    span_end     bigint,        -- last delivered offset (inclusive)
    retry_count  integer,       -- failed acks spent on the head of the span
    base_offset  bigint,        -- the segment
    created_at   timestamptz,
    blob         bytea,
    last_offset  bigint);       -- the segment's last offset (frames: last - base + 1)
