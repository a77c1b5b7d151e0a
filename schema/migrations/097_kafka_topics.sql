-- Version 97: the partition count a Kafka topic declares (broker/kafka, core/kafka).
--
-- A queue's partitions are names that appear on first write; a Kafka client needs a fixed
-- count. A queue created through the Kafka edge (CreateTopics, or auto-creation) records
-- its count here; a queue without a row answers the count its partitions named "0", "1",
-- ... imply, at least the configured default (core/kafka/topics.py). The row goes with
-- its queue.
CREATE TABLE queen.kafka_topics (
    queue_id   bigint PRIMARY KEY REFERENCES queen.queues (id) ON DELETE CASCADE,
    partitions integer NOT NULL CHECK (partitions > 0),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Producer ids of idempotent Kafka producers (InitProducerId). Taken from a sequence so that
-- no id is handed out twice, across restarts and across hosts: a record's dedup key is made
-- of its producer id, epoch and sequence (broker/kafka/produce.py).
CREATE SEQUENCE queen.kafka_producer_ids;

-- The elected group coordinator of each Kafka cluster (QUEEN_KAFKA_CLUSTER): the listener
-- whose connection holds the cluster's session advisory lock writes its node id and
-- advertised address here; every listener of the cluster names it in FindCoordinator
-- (core/kafka/election.py).
CREATE TABLE queen.kafka_coordinators (
    cluster    text PRIMARY KEY,
    node_id    integer NOT NULL,
    host       text NOT NULL,
    port       integer NOT NULL,
    elected_at timestamptz NOT NULL DEFAULT now()
);

-- The listeners of each cluster, as each last said it was alive: Metadata lists those seen
-- lately, so a client knows every host and not only the one it asked.
CREATE TABLE queen.kafka_nodes (
    cluster text NOT NULL,
    node_id integer NOT NULL,
    host    text NOT NULL,
    port    integer NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, node_id)
);
