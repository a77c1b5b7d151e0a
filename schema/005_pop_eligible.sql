-- Version 5: one definition of "partitions a pop may claim", walked in id order over a range.
-- pop_candidates calls it twice (from a random pivot up, then from the start up to the
-- pivot); each call is an index-ordered walk that stops at its limit.

-- Partitions of the queues holding something past the group's cursor with no live lease, or
-- with no cursor yet (first contact), ids in [p_from, p_to), ascending, at most p_limit.
-- windowBuffer holds a partition until it has been quiet for N seconds.
CREATE OR REPLACE FUNCTION queen.pop_eligible(
    p_queue_ids bigint[], p_group text, p_partition text, p_from bigint, p_to bigint,
    p_limit integer)
RETURNS TABLE (partition_id bigint, queue_id bigint, name text, last_offset bigint,
               fresh boolean)
LANGUAGE sql STABLE AS $$
    SELECT p.id, p.queue_id, p.name, p.last_offset, (c.partition_id IS NULL)
      FROM queen.log_partitions p
      JOIN queen.queues q ON q.id = p.queue_id
      LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
     WHERE p.queue_id = ANY(p_queue_ids)
       AND p.id >= p_from AND p.id < p_to
       AND (p_partition IS NULL OR p.name = p_partition)
       AND p.last_offset >= p.log_start
       AND (c.partition_id IS NULL
            OR (c.committed < p.last_offset
                AND (c.worker_id IS NULL OR c.lease_expires_at <= now())))
       AND (coalesce((q.options ->> 'windowBuffer')::integer, 0) = 0
            OR p.last_write_at
               <= now() - make_interval(secs => (q.options ->> 'windowBuffer')::integer))
     ORDER BY p.id
     LIMIT p_limit
$$;
