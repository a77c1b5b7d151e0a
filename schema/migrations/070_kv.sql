-- Version 70: the KV store (wire-protocol-extensions §14), which locks and semaphores (§15)
-- and the supervision documents (§21.1) are made of.
--
-- One row per (namespace, key). Both are compared in byte order (COLLATE "C", which for
-- UTF-8 is code point order, the order Python sorts str in): §14.5 applies a call's ops and
-- lists prefixes in that order, and a call locks its rows in it, so two calls never wait
-- for each other in a cycle.
--
-- `value` is the compact JSON text as the client sent it (numbers keep their digits).
-- `version` is drawn from `kv_versions` while the row is locked, so it is unique in the
-- store, never reissued (a sequence never goes back, even over a restart), and greater than
-- every earlier version of the key, across delete and re-creation. 0 marks a placeholder:
-- a row a call inserted only to hold the key's lock, which is never live.
-- `expires_at`: NULL = forever; a row is live iff it is NULL or later than the instant of
-- the call; placeholders carry '-infinity'. The reaper deletes dead rows in batches.
CREATE TABLE IF NOT EXISTS queen.kv (
    ns text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    value text NOT NULL,
    version bigint NOT NULL,
    expires_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ns, key)
);

CREATE SEQUENCE IF NOT EXISTS queen.kv_versions AS bigint;

-- The sweeper's scan, and the dashboard's "expiring soon".
CREATE INDEX IF NOT EXISTS kv_expiring ON queen.kv (expires_at) WHERE expires_at IS NOT NULL;

-- queen.kv_iso, the server's timestamp format of the KV reads: schema/functions/60_kv.sql.
