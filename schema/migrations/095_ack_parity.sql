-- Version 95: acks that cannot be resolved, acks fenced by their own lease, and one rule for
-- finding the message an ack names (docs/acks.md; the rules are in schema/functions/40_ack.sql).
--
-- `log_txn_pruned` records, per partition, an offset below which every index row the reaper
-- pruned lay, so that an ack searches the segments exactly where an earlier occurrence of its
-- transactionId can hide. queen.ack loses p_lease_from_cursor and p_default_lease (the lease
-- an item is checked against is the one its caller passes): its old signature is dropped
-- here (IF EXISTS: a database created after this layout never had it).

CREATE TABLE queen.log_txn_pruned (
    partition_id bigint PRIMARY KEY,
    below        bigint NOT NULL    -- every index row pruned so far had msg_offset < below
);

-- Partitions whose index already lacks rows for retained offsets (pruned before this
-- version) get a mark now: the lowest indexed offset when every offset from there on has its
-- row (the reaper prunes oldest first, so this is the usual shape), else past the last
-- offset (any of their spans may be searched). A partition with a row for every retained
-- offset needs no mark.
INSERT INTO queen.log_txn_pruned (partition_id, below)
SELECT p.id, CASE WHEN x.n = p.last_offset - x.low + 1 THEN x.low ELSE p.last_offset + 1 END
  FROM queen.log_partitions p
 CROSS JOIN LATERAL (SELECT count(*) AS n, min(i.msg_offset) AS low
                       FROM queen.log_txn_index i
                      WHERE i.partition_id = p.id AND i.msg_offset >= p.log_start) x
 WHERE p.last_offset >= p.log_start AND x.n < p.last_offset - p.log_start + 1;

DROP FUNCTION IF EXISTS queen.ack(text[], bigint[], text[], text[], text[], text[], bigint[],
                                  boolean, text, boolean);
