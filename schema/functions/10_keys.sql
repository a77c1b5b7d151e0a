-- Transaction keys: how the database names a transactionId.
--
-- The transactionId index (queen.log_txn_index, migration 022) keys each id by 128 bits of
-- SHA-256 of its text instead of the text itself: a row is 40 bytes whatever the id's
-- length (up to 64 KiB), and the key settles equality on its own inside the database (a
-- collision needs about 2^64 ids in one partition). The write path (dedup), acks, traces and
-- stream cycles all compute it here, so the rule is in one place.

-- The key of a transactionId. STABLE because textsend is (encoding); the key is the same for
-- the same text in a given database.
CREATE OR REPLACE FUNCTION queen.txn_key(p_transaction_id text) RETURNS uuid
LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $$ SELECT encode(substring(sha256(textsend(p_transaction_id)) FROM 1 FOR 16), 'hex')::uuid $$;
