-- The per-group depth route (wire-protocol-extensions §21.2). Loaded by
-- core/storage/statements.py.

-- name: depth_cursors
-- Each partition of a queue with the cursor its depth counts from: the named group's
-- (null when it has none); without a group, the lowest cursor among named groups, else
-- the queue-mode cursor (null when neither exists).
-- `group`: null for every group.
SELECT p.name AS partition, p.last_offset, p.log_start,
       CASE WHEN :group::text IS NOT NULL
            THEN (SELECT c.committed FROM queen.log_consumers c
                   WHERE c.partition_id = p.id AND c.consumer_group = :group::text)
            ELSE coalesce((SELECT min(c.committed) FROM queen.log_consumers c
                            WHERE c.partition_id = p.id
                              AND c.consumer_group <> '__QUEUE_MODE__'),
                          (SELECT c.committed FROM queen.log_consumers c
                            WHERE c.partition_id = p.id
                              AND c.consumer_group = '__QUEUE_MODE__'))
       END AS committed
  FROM queen.log_partitions p
 WHERE p.queue_id = :queue_id
 ORDER BY p.name;
