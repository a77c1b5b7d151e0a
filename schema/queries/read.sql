-- Statements of offset reads (fetch). Loaded by core/storage/statements.py.

-- name: fetch_head
-- A partition's offsets, names and tenant, by id (they check an id the caller remembered).
-- $1 partition id
SELECT q.name AS queue, p.name AS partition, p.last_offset, p.log_start, q.tenant
  FROM queen.log_partitions p
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE p.id = $1;

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
