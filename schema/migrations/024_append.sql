-- Version 24: a flush is one statement, addressed by names (queen.append,
-- schema/functions/20_append.sql), which replaces append_segment, append_segments and
-- ensure_partition; and the key check of encryption at rest.

-- The replaced functions (IF EXISTS: a database created after this layout never had them).
DROP FUNCTION IF EXISTS queen.append_segments(bigint[], integer[], text[], uuid[], bytea[]);
DROP FUNCTION IF EXISTS queen.append_segment(bigint, text[], uuid[], bytea);
DROP FUNCTION IF EXISTS queen.ensure_partition(text, text, text, text, jsonb);

-- The key check of encryption at rest: QUEEN_ENCRYPTION_KEY's key id and a constant sealed
-- under it, written at the first start with a key; a later start with another key (or
-- none) is refused (core/engine/key_check.py).
CREATE TABLE queen.encryption_key (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    key_id      bytea NOT NULL,
    check_value bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
