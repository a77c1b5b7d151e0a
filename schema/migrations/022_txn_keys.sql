-- Version 22: a narrower transactionId index.
--
-- The index answers two questions: "is this transactionId already stored in this partition
-- inside the dedup window?" (push) and "at which offset is this transactionId?" (ack). Both
-- need only the partition, a key that identifies the transactionId, the offset and the time
-- it was appended. Version 1 also stored the full transactionId text (up to 64 KiB, 37 bytes
-- for the official client's UUIDs) to settle 64-bit hash collisions, and the message id (for
-- duplicate answers). Now the key is 128 bits of SHA-256 of the transactionId: a collision
-- needs about 2^64 ids in one partition (none has ever been found for SHA-256 at any length),
-- so the key settles equality on its own, inside the database, in one round trip; and the
-- message id of a duplicate is read from its segment on the (rare) duplicate path.
-- A row is 40 bytes of data instead of 77+ (UUID text), whatever the transactionId's length.

CREATE TABLE queen.log_txn_keys (
    partition_id bigint NOT NULL,
    msg_offset   bigint NOT NULL,
    created_at   timestamptz NOT NULL,      -- append time of the message (its segment's)
    txn_key      uuid NOT NULL,             -- queen.txn_key(transactionId)
    PRIMARY KEY (partition_id, txn_key, msg_offset)
);
-- The keys of the rows written before, computed as queen.txn_key computes them
-- (schema/functions/10_keys.sql; a migration calls no function of that layer).
INSERT INTO queen.log_txn_keys (partition_id, msg_offset, created_at, txn_key)
SELECT partition_id, msg_offset, created_at,
       encode(substring(sha256(textsend(transaction_id)) FROM 1 FOR 16), 'hex')::uuid
  FROM queen.log_txn_index;
DROP TABLE queen.log_txn_index;
ALTER TABLE queen.log_txn_keys RENAME TO log_txn_index;
ALTER TABLE queen.log_txn_index RENAME CONSTRAINT log_txn_keys_pkey TO log_txn_index_pkey;
-- Rows arrive in created_at order: the reaper finds old ones through a BRIN summary.
CREATE INDEX log_txn_index_created_brin ON queen.log_txn_index USING brin (created_at);
