-- Version 40: traces (wire-protocol §6.4).
--
-- A trace is a note a consumer attaches to a message it is processing (the official
-- client's per-message `trace()`): the message's address (partition, transactionId), the
-- consumer group, an event type, free JSON data, and any number of trace names that tie
-- notes about different messages into one story. The message's offset is resolved through
-- the transactionId index when the trace is written, so a lookup by name can show the
-- message's payload later without searching the log (null when the index no longer had
-- it). worker_id is the lease id holding the (partition, group) at that moment.
-- The reaper deletes traces older than TRACE_RETENTION_DAYS (core/upkeep/maintenance.py).

CREATE TABLE queen.traces (
    id             uuid PRIMARY KEY,             -- traceId on the wire (UUIDv7)
    partition_id   bigint NOT NULL,
    transaction_id text NOT NULL,
    txn_key        uuid NOT NULL,                -- queen.txn_key(transaction_id)
    msg_offset     bigint,                       -- the message's offset, if it was indexed
    consumer_group text NOT NULL,
    event_type     text NOT NULL,
    data           bytea NOT NULL,               -- the JSON document as posted
    trace_names    text[] NOT NULL DEFAULT '{}',
    worker_id      text,
    created_at     timestamptz NOT NULL DEFAULT now()
);
-- Lookup by message (and removal with a deleted queue's partitions).
CREATE INDEX traces_message_idx ON queen.traces (partition_id, txn_key, created_at);
-- Retention deletes the oldest first.
CREATE INDEX traces_created_idx ON queen.traces (created_at);

-- The trace names index: one row per (trace, name), newest first per name.
CREATE TABLE queen.trace_names (
    trace_id   uuid NOT NULL,
    name       text NOT NULL,
    created_at timestamptz NOT NULL,             -- the trace's
    PRIMARY KEY (trace_id, name)
);
CREATE INDEX trace_names_name_idx ON queen.trace_names (name, created_at DESC);
