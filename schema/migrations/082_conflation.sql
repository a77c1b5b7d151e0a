-- Version 82: conflation and the pop autopilot's width (wire-protocol-extensions §20).
--
-- The conflation policy of a (queue, group) is stored with the group's subscription record
-- (the rules are in schema/functions/30_pop.sql). Groups that have cursors but no record
-- get one now (non-conflating: registered before conflation). queen.pop and
-- queen.pop_shared take new arguments and answer queen.pop_answer rows, and queen.ack
-- answers a new column (`conflated`): their old signatures are dropped here (IF EXISTS: a
-- database created after this layout never had them) and the functions layer creates the
-- current ones.

ALTER TABLE queen.consumer_subscriptions
    ALTER COLUMN mode DROP NOT NULL,                          -- null: no first-contact choice yet
    ADD COLUMN conflation boolean NOT NULL DEFAULT false;     -- last-value delivery (§20.2)

INSERT INTO queen.consumer_subscriptions (queue_id, consumer_group, mode, subscription_from)
SELECT DISTINCT p.queue_id, c.consumer_group, NULL::text, NULL::timestamptz
  FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
 WHERE c.consumer_group <> '__QUEUE_MODE__'
ON CONFLICT ON CONSTRAINT consumer_subscriptions_pkey DO NOTHING;

DROP FUNCTION IF EXISTS queen.pop(text, text, text, text, text, boolean, text, timestamptz,
                                  boolean, integer, integer, boolean, integer, integer, text,
                                  bigint[], float8, integer);
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

DROP FUNCTION IF EXISTS queen.pop_shared(text, text, text, text, text, boolean, text,
                                         timestamptz, boolean, integer, integer, boolean,
                                         integer, integer, text[], bigint[], float8[],
                                         integer);
DROP FUNCTION IF EXISTS queen.ack(text[], bigint[], text[], text[], text[], text[], bigint[],
                                  boolean, text, boolean);
