-- Statements of offset reads (fetch). Loaded by core/storage/statements.py.

-- name: fetch_head
-- A partition's offsets, names and tenant, by id (they check an id the caller remembered).
SELECT q.name AS queue, p.name AS partition, p.last_offset, p.log_start, q.tenant
  FROM queen.log_partitions p
  JOIN queen.queues q ON q.id = p.queue_id
 WHERE p.id = :partition_id;

-- name: fetch_segments
-- Segments of a partition holding offsets from `offset` on, in offset order: at most `limit`
-- of them, and none after those whose stored bytes reach `max_bytes` (a segment stores no
-- more bytes than its records hold, give or take a frame's header, so the records a budget
-- of `max_bytes` takes are in the segments kept; the first is always kept). The segment
-- that contains `offset` is found through the primary key (largest base_offset <= offset),
-- so the scan starts there instead of filtering on last_offset. octet_length reads a stored
-- value's size from its TOAST pointer: the segments left out are not read.
SELECT base_offset, last_offset, created_at, blob
  FROM (SELECT base_offset, last_offset, created_at, blob,
               coalesce(sum(octet_length(blob)) OVER (
                   ORDER BY base_offset ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                   0) AS stored_before
          FROM queen.log_segments
         WHERE partition_id = :partition_id
           AND base_offset >= coalesce((SELECT max(s.base_offset) FROM queen.log_segments s
                                         WHERE s.partition_id = :partition_id
                                           AND s.base_offset <= :offset), :offset)
         ORDER BY base_offset
         LIMIT :limit) kept
 WHERE stored_before < :max_bytes
 ORDER BY base_offset;
