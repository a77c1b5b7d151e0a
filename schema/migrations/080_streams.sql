-- Version 80: streams (wire-protocol-extensions §18): queries, their state, and the cycle.
--
-- A query is a named operator chain (the client's `Stream`) reading a source queue through
-- the consumer group `streams.<name>` and writing a sink queue. Its state is a small JSON
-- document per (query, source partition, key). A cycle commits, in one statement and one
-- transaction, what the client computed from one leased batch: state upserts/deletes, sink
-- pushes and the source ack (queen.stream_cycle).

CREATE TABLE queen.stream_queries (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),   -- query_id on the wire
    name         text NOT NULL UNIQUE,
    source_queue text NOT NULL,
    sink_queue   text,                                 -- null: no sink (foreach or none)
    config_hash  text NOT NULL,                        -- the client's hash of the chain
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- State rows. The key is compared in byte order (COLLATE "C"): state/get answers in key
-- byte order and filters by a literal prefix, both served by the primary key. No foreign
-- keys, as for every hot table (001_log.sql): their checks would take KEY SHARE locks on
-- the partition row that every push to the source partition locks FOR UPDATE, coupling
-- cycles to producers (and deadlocking with a flush that holds a sink partition). Rows
-- are deleted explicitly instead: with their partitions (delete_partition_data, a deleted
-- queue) and with their query (stream_delete_query, a reset), each under the query's
-- advisory lock or after the partition is gone.
CREATE TABLE queen.stream_state (
    query_id     uuid NOT NULL,
    partition_id bigint NOT NULL,      -- the source partition
    key          text COLLATE "C" NOT NULL,
    value        jsonb NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (query_id, partition_id, key)
);
CREATE INDEX stream_state_partition_idx ON queen.stream_state (partition_id);

-- One row per (query, source partition) that committed a cycle: what the dashboard shows.
CREATE TABLE queen.stream_partitions (
    query_id      uuid NOT NULL,
    partition_id  bigint NOT NULL,
    cycles        bigint NOT NULL DEFAULT 0,
    last_cycle_at timestamptz NOT NULL,
    PRIMARY KEY (query_id, partition_id)
);
CREATE INDEX stream_partitions_partition_idx ON queen.stream_partitions (partition_id);

-- queen.stream_register, queen.stream_delete_query and queen.stream_cycle:
-- schema/functions/50_streams.sql.
