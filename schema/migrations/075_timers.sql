-- Version 75: timers (wire-protocol-extensions §16): a message promised now, pushed later.
--
-- One row per pending timer, keyed by (queue, timer_key) in byte order (COLLATE "C": the
-- order §16.2 applies a call's ops in and §16.3 pages in). The row goes when the timer
-- fires (in the fire's transaction), is cancelled, or moves to the DLQ. Nothing refers to
-- queues: a timer may name a queue that does not exist yet (the fire creates it).
CREATE TABLE queen.timers (
    queue        text COLLATE "C" NOT NULL,
    timer_key    text COLLATE "C" NOT NULL,
    partition    text NOT NULL,
    deliver_at   timestamptz NOT NULL,   -- not before: now + delayMs at schedule
    fire_at      timestamptz NOT NULL,   -- when a sweep may take it: deliver_at, or the
                                         -- end of its backoff after a failed fire
    txn          text NOT NULL,          -- the fired message's transactionId
    message_id   uuid NOT NULL,          -- the fired message's id, minted at schedule
    payload      bytea NOT NULL,         -- the decoded base64 bytes, sealed when `sealed`
    payload_zstd boolean NOT NULL,       -- the bytes are a zstd frame (decompressed at fire)
    encrypted    boolean NOT NULL,       -- as peek reports it: the client's flag, or sealed
    sealed       boolean NOT NULL,       -- the broker sealed it (core/engine/encryption.py)
    producer_sub text,                   -- the scheduler's JWT sub
    attempts     integer NOT NULL DEFAULT 0,  -- failed fires since the last schedule
    last_error   text,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (queue, timer_key)
);
-- The sweep takes the earliest due rows first.
CREATE INDEX timers_fire_at_idx ON queen.timers (fire_at);
-- The payload is often compressed or sealed already.
ALTER TABLE queen.timers ALTER COLUMN payload SET STORAGE EXTERNAL;

-- queen.timers_apply and queen.timer_dead_letter: schema/functions/70_timers.sql.
