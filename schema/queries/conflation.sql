-- Conflation policies (wire-protocol-extensions §20.2; stored by queen.pop, version 82).
-- Loaded by core/storage/statements.py.

-- name: conflation_policy
-- Whether the group conflates on any queue a pop addresses: true/false, null when it has no
-- record on any of them (its first pop has not happened).
-- `queue`: null for discovery by `namespace` / `task`.
SELECT bool_or(s.conflation)
  FROM queen.consumer_subscriptions s
  JOIN queen.queues q ON q.id = s.queue_id
 WHERE s.consumer_group = :group::text AND q.tenant = :tenant::text
   AND CASE WHEN :queue::text IS NOT NULL THEN q.name = :queue::text
            ELSE (:namespace::text IS NULL OR q.namespace = :namespace::text)
                 AND (:task::text IS NULL OR q.task = :task::text) END;

-- name: conflation_of_queue
-- The group's stored policy on one queue (false when it has no record).
SELECT coalesce((SELECT s.conflation FROM queen.consumer_subscriptions s
                  WHERE s.queue_id = :queue_id AND s.consumer_group = :group::text), false);
