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
