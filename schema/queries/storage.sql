-- Statements of the storage plumbing: liveness, connection reset, migrations, wake-ups.
-- Loaded by core/storage/statements.py.

-- name: ping
-- Is the server answering?
SELECT 1;

-- name: commit_probe
-- Does a write commit? A transactional message (a WAL record, no table) makes this
-- statement's commit wait for its flush and for synchronous standbys, as a push's does: a
-- server that answers reads while its commits stall fails this one (core/service.py, a push
-- that failed as an outage). Logical decoding sees it under the prefix `queen.probe`.
SELECT pg_logical_emit_message(true, 'queen.probe', '')::text;

-- name: silence_probe
-- Does the server this process is connected to still answer? (core/storage/liveness.py)
SELECT 1;

-- name: listener_probe
-- Does the server behind the LISTEN connection still answer? (core/engine/listener.py)
SELECT 1;

-- name: rollback
-- End a transaction a released connection left open.
ROLLBACK;

-- name: migration_lock
-- Serialise migrations across processes (session-level advisory lock).
SELECT pg_advisory_lock(:key);

-- name: migration_unlock
-- Release the migration lock.
SELECT pg_advisory_unlock(:key);

-- name: migration_ledger
-- The tables recording applied migrations and the checksums of the function files applied
-- (core/storage/migrations.py), created on first start.
CREATE SCHEMA IF NOT EXISTS queen;
CREATE TABLE IF NOT EXISTS queen.schema_migrations (
    version integer PRIMARY KEY, name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS queen.schema_functions (
    file text PRIMARY KEY, checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now());

-- name: migrations_applied
-- Versions already applied.
SELECT version FROM queen.schema_migrations;

-- name: migration_record
-- Record one applied migration.
INSERT INTO queen.schema_migrations (version, name) VALUES (:version, :name);

-- name: functions_applied
-- The function files applied, with the SHA-256 of the text applied.
SELECT file, checksum FROM queen.schema_functions;

-- name: functions_record
-- Record one applied function file with the SHA-256 of its text (`checksum`).
INSERT INTO queen.schema_functions (file, checksum) VALUES (:file, :checksum)
ON CONFLICT (file) DO UPDATE SET checksum = excluded.checksum, applied_at = now();

-- name: functions_forget
-- Forget every recorded function checksum (a migration ran: all files are applied again).
DELETE FROM queen.schema_functions;

-- name: notify_wakeups
-- Wake parked pops in every broker process: one notification per payload (see
-- core/engine/wakeup.py for the payload format).
SELECT pg_notify(:channel, p) FROM unnest(:payloads::text[]) AS p;

-- name: notify_each
-- One notification per (channel, payload), in the order given (core/engine/listener.py
-- sends a round's claims before its wake-ups).
SELECT pg_notify(c, p) FROM unnest(:channels::text[], :payloads::text[]) AS n(c, p);

-- name: admitted_connections
-- How many connections the server admits to roles that are not superusers: max_connections
-- less the slots it reserves (reserved_connections exists from PostgreSQL 16).
SELECT current_setting('max_connections')::int
       - current_setting('superuser_reserved_connections')::int
       - coalesce(current_setting('reserved_connections', true)::int, 0);
