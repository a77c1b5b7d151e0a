-- Statements of the KV store (core/kv/, wire-protocol-extensions §14). Loaded by
-- core/storage/statements.py. Every liveness decision uses now(), the instant the
-- transaction started: one instant per call, shared by a transaction's riders (§14.5, §17).
-- Each tenant has a key space of its own (migration 140): a call is one tenant's, its
-- `:tenant`.

-- name: kv_lock
-- Lock the rows of the keys a call writes or checks (distinct (ns, key) pairs), in byte order,
-- inserting a placeholder (version 0, never live) for a key that has no row so that it has a
-- lock too; answer each row as it stands with a version drawn now, while its lock is held
-- (§14.5: versions grow per key). `created` tells a placeholder this call inserted (removed
-- again when unused).
INSERT INTO queen.kv AS k (tenant, ns, key, value, version, expires_at, updated_at)
SELECT :tenant, t.ns, t.key, 'null', 0, '-infinity', now()
  FROM unnest(:namespaces::text[], :keys::text[]) AS t(ns, key)
 ORDER BY t.ns COLLATE "C", t.key COLLATE "C"
    ON CONFLICT (tenant, ns, key) DO UPDATE SET version = k.version
RETURNING k.ns, k.key, k.value, k.version, queen.kv_iso(k.expires_at) AS expires_at,
          queen.kv_iso(k.updated_at) AS updated_at,
          (k.expires_at IS NULL OR k.expires_at > now()) AS live, (k.xmax = 0) AS created,
          nextval('queen.kv_versions') AS next_version, now() AS instant;

-- name: kv_get
-- The live rows among some keys, unlocked (timestamps as wire text, as in every read here).
SELECT k.ns, k.key, k.value, k.version, queen.kv_iso(k.expires_at) AS expires_at,
       queen.kv_iso(k.updated_at) AS updated_at
  FROM unnest(:namespaces::text[], :keys::text[]) AS t(ns, key)
  JOIN queen.kv k ON k.tenant = :tenant AND k.ns = t.ns AND k.key = t.key
 WHERE k.expires_at IS NULL OR k.expires_at > now();

-- name: kv_write
-- Apply a call's writes to rows it holds locked: set value, version and expiry (or keep the
-- expiry, for an incr of a live counter), and delete rows (applied deletes, and placeholders
-- the call inserted but did not write), in the `tenant`'s key space. Answers the rows changed
-- and deleted. Values are JSON text, an expiry null is forever, `keep` keeps the row's expiry.
WITH updated AS (
    UPDATE queen.kv k
       SET value = u.value, version = u.version, updated_at = now(),
           expires_at = CASE WHEN u.keep THEN k.expires_at ELSE u.expires_at END
      FROM unnest(:namespaces::text[], :keys::text[], :values::text[], :versions::bigint[],
                  :expiries::timestamptz[], :keep::boolean[])
           AS u(ns, key, value, version, expires_at, keep)
     WHERE k.tenant = :tenant AND k.ns = u.ns AND k.key = u.key
    RETURNING 1),
deleted AS (
    DELETE FROM queen.kv k USING unnest(:deleted_namespaces::text[], :deleted_keys::text[])
                                 AS d(ns, key)
     WHERE k.tenant = :tenant AND k.ns = d.ns AND k.key = d.key
    RETURNING 1)
SELECT (SELECT count(*) FROM updated) AS updated, (SELECT count(*) FROM deleted) AS deleted;

-- name: kv_get_prefix
-- Up to `limit` live rows of a namespace whose key starts with `prefix`, in byte order, after
-- `after` (exclusive; '' = from the start). `upper` is the first string past every key with
-- that prefix
-- (NULL when there is none to compute), so the index range ends there.
SELECT k.key, CASE WHEN :keys_only::boolean THEN NULL ELSE k.value END AS value, k.version,
       queen.kv_iso(k.expires_at) AS expires_at, queen.kv_iso(k.updated_at) AS updated_at
  FROM queen.kv k
 WHERE k.tenant = :tenant AND k.ns = :ns
   AND k.key >= :prefix AND (:upper::text IS NULL OR k.key < :upper)
   AND k.key > :after AND starts_with(k.key, :prefix)
   AND (k.expires_at IS NULL OR k.expires_at > now())
 ORDER BY k.key
 LIMIT :limit;

-- name: kv_sweep
-- Delete up to `batch` dead rows (expired, or placeholders), skipping rows a call holds: two
-- sweepers, or a sweeper and a writer, never wait for each other.
WITH dead AS (
    SELECT tenant, ns, key FROM queen.kv
     WHERE expires_at <= now()
     ORDER BY expires_at
     LIMIT :batch
       FOR UPDATE SKIP LOCKED)
DELETE FROM queen.kv k USING dead d
 WHERE k.tenant = d.tenant AND k.ns = d.ns AND k.key = d.key;

-- name: kv_namespaces
-- One page of namespaces with their live keys, value bytes and the keys expiring within
-- `horizon_seconds`, in byte order after `after` (exclusive, '' = from the start).
SELECT ns, count(*) AS keys, coalesce(sum(octet_length(value)), 0) AS bytes,
       count(*) FILTER (WHERE expires_at
                              <= now() + make_interval(secs => :horizon_seconds::double precision))
           AS expiring
  FROM queen.kv
 WHERE tenant = :tenant AND ns > :after AND (expires_at IS NULL OR expires_at > now())
 GROUP BY ns
 ORDER BY ns
 LIMIT :limit;
