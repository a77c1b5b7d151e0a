-- Version 93: the ready set's pop (issue 26; core/engine/ready, functions/30_pop.sql).
--
-- A pop no longer scans the queue's partitions: each process keeps, per (queue, group), the
-- partitions it knows to be ready, and a pop claims a few of them by key with
-- queen.pop_ready, which answers per candidate. The scanning pop (queen.pop, its shared form
-- and its candidate scan queen.pop_eligible) goes; the paged scan lives on only in the
-- reseed (queries/ready.sql).
DROP FUNCTION IF EXISTS queen.pop_shared(text, text, text, text, text, boolean, text,
                                         timestamptz, boolean, integer, integer, boolean,
                                         integer, integer, text[], bigint[], float8[],
                                         integer, boolean, integer, boolean, integer);
DROP FUNCTION IF EXISTS queen.pop(text, text, text, text, text, boolean, text, timestamptz,
                                  boolean, integer, integer, boolean, integer, integer, text,
                                  bigint[], float8, integer, boolean, integer, boolean,
                                  integer);
DROP FUNCTION IF EXISTS queen.pop_eligible(bigint[], text, text, bigint, bigint, integer);

-- A row of queen.pop_ready's answer, by `verdict`:
--   took    a segment of a span delivered to this pop (the pop_answer columns);
--   empty   a candidate with nothing past the group's cursor (or gone): forget it;
--   leased  a candidate held by a live lease until `due`;
--   later   a candidate whose data the clock holds until `due` (retryDelay,
--           delayedProcessing, windowBuffer, minPopWaitTime);
--   busy    a candidate with claimable data this pop did not take (its budget or width was
--           spent first, or a concurrent claim held the cursor's lock);
--   queue   an addressed queue (queue_id, queue, conflation, width): what the pop covered.
CREATE TYPE queen.ready_answer AS (
    verdict      text,
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
    width        integer,
    due          timestamptz);
