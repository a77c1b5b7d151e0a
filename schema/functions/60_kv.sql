-- The KV store (wire-protocol-extensions §14; table queen.kv, migration 070): the one
-- function its statements share.

-- A timestamp as the wire writes it (ISO-8601 UTC, microseconds, `Z`), formatted by the
-- server: a read of 100 rows would otherwise format 200 of them in Python.
CREATE OR REPLACE FUNCTION queen.kv_iso(ts timestamptz) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') $$;
