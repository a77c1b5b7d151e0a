-- Version 1: the log model. Queues own partitions; partitions own segments (the only place
-- messages live), a transactionId index, consumer cursors and dead letters.
-- Hot tables carry no foreign keys: every hot statement is keyed by partition_id and the
-- partition row lock already orders writers, so RI triggers would only add cost. Deleting a
-- queue deletes its rows explicitly in one transaction (queries/write.sql: delete_queue_*).

CREATE SCHEMA IF NOT EXISTS queen;

CREATE TABLE queen.queues (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    namespace   text NOT NULL DEFAULT '',      -- text before the first '.' unless configured
    task        text NOT NULL DEFAULT '',      -- text between the first and second '.'
    options     jsonb NOT NULL DEFAULT '{}',   -- effective options, camelCase keys (wire names)
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX queues_namespace_idx ON queen.queues (namespace);
CREATE INDEX queues_task_idx ON queen.queues (task);

CREATE TABLE queen.log_partitions (
    id            bigserial PRIMARY KEY,       -- partitionId on the wire (decimal text)
    queue_id      bigint NOT NULL,
    name          text NOT NULL,
    last_offset   bigint NOT NULL DEFAULT -1,  -- last allocated offset; -1 = empty
    log_start     bigint NOT NULL DEFAULT 0,   -- first retained offset
    last_write_at timestamptz,                 -- created_at of the newest segment
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (queue_id, name)
);

CREATE TABLE queen.log_segments (
    partition_id  bigint NOT NULL,
    base_offset   bigint NOT NULL,             -- offset of the first frame
    last_offset   bigint NOT NULL,             -- offset of the last frame (inclusive)
    message_count integer NOT NULL,
    created_at    timestamptz NOT NULL,        -- stamped under the partition lock: monotone
    blob          bytea NOT NULL,              -- zstd of length-prefixed storage frames
    PRIMARY KEY (partition_id, base_offset)
);
-- The blob is already zstd: keep PostgreSQL from trying to compress it again.
ALTER TABLE queen.log_segments ALTER COLUMN blob SET STORAGE EXTERNAL;

-- transactionId -> offset, per partition: dedup inside the window and ack address resolution.
-- Keyed by a 64-bit hash because a transactionId may be up to 65535 bytes (too long for a
-- btree key); the text column settles hash collisions.
CREATE TABLE queen.log_txn_index (
    partition_id   bigint NOT NULL,
    txn_hash       bigint NOT NULL,            -- hashtextextended(transaction_id, 0)
    msg_offset     bigint NOT NULL,
    transaction_id text NOT NULL,
    message_id     uuid NOT NULL,
    created_at     timestamptz NOT NULL,
    PRIMARY KEY (partition_id, txn_hash, msg_offset)
);

-- One cursor per (partition, consumer group); the lease lives on the same row.
CREATE TABLE queen.log_consumers (
    partition_id     bigint NOT NULL,
    consumer_group   text NOT NULL,
    committed        bigint NOT NULL DEFAULT -1,  -- last acknowledged offset
    batch_end        bigint,                      -- last offset of the live leased span
    worker_id        text,                        -- leaseId of the live lease
    lease_expires_at timestamptz,
    retry_count      integer NOT NULL DEFAULT 0,  -- failed acks spent on the head of the span
    total_consumed   bigint NOT NULL DEFAULT 0,
    last_consumed_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group)
);
CREATE INDEX log_consumers_worker_idx ON queen.log_consumers (worker_id)
    WHERE worker_id IS NOT NULL;
CREATE INDEX log_consumers_lease_idx ON queen.log_consumers (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
CREATE INDEX log_consumers_group_idx ON queen.log_consumers (consumer_group);

CREATE TABLE queen.log_dlq (
    id             bigserial PRIMARY KEY,
    partition_id   bigint NOT NULL,
    consumer_group text NOT NULL,
    msg_offset     bigint NOT NULL,
    transaction_id text NOT NULL,
    message_id     uuid NOT NULL,
    trace_id       uuid,
    producer_sub   text,
    payload        bytea NOT NULL,              -- the message's JSON payload bytes, as stored
    error_message  text,
    retry_count    integer NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL,        -- when the message was appended
    failed_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX log_dlq_partition_txn_idx ON queen.log_dlq (partition_id, transaction_id);
CREATE INDEX log_dlq_failed_at_idx ON queen.log_dlq (failed_at DESC);

-- A named group's first-contact choice per queue, so partitions it touches later are seeded
-- from the same instant (wire-protocol §4.2, subscription seeding).
CREATE TABLE queen.consumer_subscriptions (
    queue_id          bigint NOT NULL,
    consumer_group    text NOT NULL,
    mode              text NOT NULL,             -- all | new | timestamp
    subscription_from timestamptz,               -- the instant for new/timestamp
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, consumer_group)
);
