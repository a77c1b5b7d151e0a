-- Statements of encryption at rest (core/engine/key_check.py; the table:
-- schema/migrations/024_append.sql).

-- name: key_check_insert
-- Record the key check at the first start with a key (a concurrent first start wins or
-- loses; the loser then verifies the winner's).
-- `check_value`: the check constant sealed under the key.
INSERT INTO queen.encryption_key (key_id, check_value) VALUES (:key_id, :check_value)
ON CONFLICT (singleton) DO NOTHING;

-- name: key_check_read
-- The stored key check, if any.
SELECT key_id, check_value, created_at FROM queen.encryption_key;

-- name: encrypted_queue_names
-- Queues with encryptionEnabled (at most `limit` names, for a start-up warning).
SELECT name FROM queen.queues
 WHERE coalesce((options ->> 'encryptionEnabled')::boolean, false)
 ORDER BY name LIMIT :limit;
