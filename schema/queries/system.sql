-- Statements of the maintenance switches (core/admin/switches.py). Loaded by
-- core/storage/statements.py.

-- name: system_state_read
-- The switches, their version, and this database's spool name.
SELECT push_maintenance, pop_maintenance, version, instance_id::text AS instance_id
  FROM queen.system_state;

-- name: system_state_write
-- Set either switch (NULL keeps it), bump the version, and tell every broker process (the
-- notification is delivered at commit, with the row).
-- `push`, `pop`: the switch's new state, or NULL to leave it; `channel`: the notification's.
WITH changed AS (
    UPDATE queen.system_state
       SET push_maintenance = coalesce(:push::boolean, push_maintenance),
           pop_maintenance = coalesce(:pop::boolean, pop_maintenance),
           version = version + 1, changed_at = now()
    RETURNING push_maintenance, pop_maintenance, version, instance_id::text AS instance_id)
SELECT c.push_maintenance, c.pop_maintenance, c.version, c.instance_id
  FROM changed c,
       LATERAL (SELECT pg_notify(:channel::text, format('%s:%s:%s', c.version,
                                                 c.push_maintenance::int,
                                                 c.pop_maintenance::int))) AS sent;
