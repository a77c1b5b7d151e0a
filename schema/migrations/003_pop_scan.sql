-- Version 3: walk a queue's partitions in id order from a random pivot (pop_candidates).
-- Concurrent consumers then start their scans at different partitions instead of all
-- contending for the first few rows and skipping each other's locks.
CREATE INDEX log_partitions_queue_id_idx ON queen.log_partitions (queue_id, id);
