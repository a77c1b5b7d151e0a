-- Version 160: the transactionId index looked up through a hash index on its key.
--
-- Every read of queen.log_txn_index that serves a push or an ack names the key
-- (`txn_key = ...`, with the partition, an offset bound or the window as filters); the
-- primary key (partition_id, txn_key, msg_offset), a B-tree, was there for those lookups
-- only, since msg_offset made it unique by construction. Its keys are random (128 bits of
-- SHA-256), so each message's entry lands on a random leaf: a leaf insert and, as leaves
-- fill, page splits in the WAL (about 126 of the 500 bytes of WAL per message at pushes of
-- 100, docs/benchmarks/history.md). A hash index on the key alone writes a smaller entry
-- (the key's 32-bit hash and the row's address) and splits buckets instead of pages.
--
-- What it costs: the rows of a key in every partition share a bucket, so a lookup reads
-- each of them and keeps its partition's (a transactionId repeated in many messages, which
-- only a queue with dedupWindowSeconds 0 stores, makes its lookups read every repeat); and
-- a queue's deletion (queries/write.sql delete_partition_data) reads the table instead of
-- the index to find its partitions' rows. The reaper finds old rows through the BRIN index
-- on created_at (migration 022), as before.
ALTER TABLE queen.log_txn_index DROP CONSTRAINT log_txn_index_pkey;
CREATE INDEX log_txn_index_key_hash ON queen.log_txn_index USING hash (txn_key);
