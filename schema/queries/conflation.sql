-- Conflation policies (wire-protocol-extensions §20.2; stored by queen.pop, version 82).
-- Loaded by core/storage/statements.py.

-- name: conflation_policy
-- Whether the group conflates on any queue a pop addresses: true/false, null when it has no
-- record on any of them (its first pop has not happened).
-- $1 queue name or null (discovery: $2 namespace / $3 task), $4 consumer group, $5 tenant
SELECT bool_or(s.conflation)
  FROM queen.consumer_subscriptions s
  JOIN queen.queues q ON q.id = s.queue_id
 WHERE s.consumer_group = $4::text AND q.tenant = $5::text
   AND CASE WHEN $1::text IS NOT NULL THEN q.name = $1::text
            ELSE ($2::text IS NULL OR q.namespace = $2::text)
                 AND ($3::text IS NULL OR q.task = $3::text) END;

-- name: conflation_of_queue
-- The group's stored policy on one queue (false when it has no record).
-- $1 queue id, $2 consumer group
SELECT coalesce((SELECT s.conflation FROM queen.consumer_subscriptions s
                  WHERE s.queue_id = $1 AND s.consumer_group = $2::text), false);
