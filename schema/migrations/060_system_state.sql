-- Version 60: the maintenance switches (wire-protocol §11), shared by every broker process.
--
-- One row. `push_maintenance` diverts pushes to each worker's disk spool; `pop_maintenance`
-- makes pops answer 204. `version` grows with every change, so a process that hears of two
-- changes out of order (NOTIFY and its periodic re-read) keeps the newer. `instance_id`
-- names this database for the spool: a worker spools into a directory named by it, so a
-- spool left on disk is only ever drained into the database it was meant for.
CREATE TABLE IF NOT EXISTS queen.system_state (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    push_maintenance boolean NOT NULL DEFAULT false,
    pop_maintenance boolean NOT NULL DEFAULT false,
    version bigint NOT NULL DEFAULT 0,
    instance_id uuid NOT NULL DEFAULT gen_random_uuid(),
    changed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO queen.system_state DEFAULT VALUES ON CONFLICT DO NOTHING;
