-- Version 150: a shape that Citus can distribute, shared by every deployment (issue 35;
-- docs/deploying/citus.md). On Citus every table that holds rows of one partition is
-- distributed on the partition's id, and every unique key of such a table must contain that
-- id; on one PostgreSQL nothing about these tables changes but the keys below.
--
-- 1. The partition directory. A partition's row in log_partitions was both the directory a
--    push looks it up in by (queue, name), unique, and the head its every push moves
--    (last_offset). A distributed table cannot hold a unique key without its distribution
--    column, so the directory moves to a table of its own, small and rarely written (a
--    reference table on Citus: a copy on every node, read locally): a push reads it to learn
--    the partition's id, then writes only rows keyed by that id. log_partitions keeps its
--    queue_id and name (set at creation, never changed) for what lists partitions by queue.
--    Partitions are created by queen.partition_ids (schema/functions/20_append.sql), which
--    writes both rows; a queue's deletion removes both.
CREATE TABLE queen.partition_directory (
    queue_id     bigint NOT NULL,
    name         text NOT NULL,
    partition_id bigint NOT NULL UNIQUE,
    PRIMARY KEY (queue_id, name)
);
-- The ready set's reseed pages a queue's partitions by id (queries/ready.sql).
CREATE INDEX partition_directory_queue_idx ON queen.partition_directory (queue_id, partition_id);
INSERT INTO queen.partition_directory (queue_id, name, partition_id)
SELECT queue_id, name, id FROM queen.log_partitions;
ALTER TABLE queen.log_partitions DROP CONSTRAINT log_partitions_queue_id_name_key;

-- 2. Dead letters are keyed by their partition and their own id (the id alone stays
--    indexed: the DLQ's routes address a row by it).
ALTER TABLE queen.log_dlq DROP CONSTRAINT log_dlq_pkey;
ALTER TABLE queen.log_dlq ADD PRIMARY KEY (partition_id, id);
CREATE INDEX log_dlq_id_idx ON queen.log_dlq (id);

-- 3. Where a lease's partitions are, by the lease. An extension names only its leaseId; on
--    Citus a search of the cursors by worker_id would read every shard. There a pop claims
--    with one statement per shard its candidates live on, and its leaseId names the first
--    (core/storage/shards.py): each statement writes one row here, on its own shard, keyed
--    by that shard's route (a number the shard's hash range holds), and the first shard's
--    row names the routes of the others. An extension reads that row, the cursors by key,
--    then the other shards' rows: one statement per shard. On one PostgreSQL pops write no
--    row (they pass no route) and an extension searches by worker_id as before. Rows go
--    once the lease is over (the reaper).
CREATE TABLE queen.log_leases (
    route         bigint NOT NULL,       -- the shard's route: rows of a shard stay on it
    lease_id      text NOT NULL,
    partition_ids bigint[] NOT NULL,     -- the partitions the lease was given on this shard
    routes        bigint[] NOT NULL DEFAULT '{}',  -- other shards the lease has parts on
    expires_at    timestamptz NOT NULL,  -- the latest expiry of its spans here
    PRIMARY KEY (route, lease_id)
);
CREATE INDEX log_leases_expiry_idx ON queen.log_leases (route, expires_at);

-- queen.pop_ready and queen.ack take the route of the shard their partitions are on first
-- (their distribution argument on Citus), and queen.ack the items' tenants: their old
-- signatures (pop_ready's as version 140 left it) go, and the functions layer creates the
-- new ones.
DROP FUNCTION IF EXISTS queen.pop_ready(text, text, text, text, text, text, boolean, text,
                                        timestamptz, boolean, integer, integer, boolean,
                                        integer, integer, text, bigint[], boolean, integer);
DROP FUNCTION IF EXISTS queen.ack(text[], bigint[], text[], text[], text[], text[], bigint[],
                                  boolean);
