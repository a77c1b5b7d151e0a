-- Statements of offset reads (fetch). Loaded by core/storage/statements.py.

-- name: fetch_partition_state
-- A queue's partition by name with its offsets; queue_id is null when the queue is unknown,
-- partition_id is null when the queue exists but the partition does not.
-- $1 queue name, $2 partition name, $3 tenant
SELECT q.id AS queue_id, p.id AS partition_id, p.last_offset, p.log_start
  FROM queen.queues q
  LEFT JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = $2
 WHERE q.tenant = $3 AND q.name = $1;

-- name: fetch_segments
-- Segments holding offsets from $2 on, in offset order, at most $3 of them. The segment that
-- contains $2 is found through the primary key (largest base_offset <= $2), so the scan starts
-- there instead of filtering on last_offset.
-- $1 partition id, $2 first wanted offset, $3 segment limit
SELECT base_offset, last_offset, created_at, blob
  FROM queen.log_segments
 WHERE partition_id = $1
   AND base_offset >= coalesce((SELECT max(s.base_offset) FROM queen.log_segments s
                                 WHERE s.partition_id = $1 AND s.base_offset <= $2), $2)
 ORDER BY base_offset
 LIMIT $3;
