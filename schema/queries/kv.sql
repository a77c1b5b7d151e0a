-- Statements of the KV store (core/kv/, wire-protocol-extensions §14). Loaded by
-- core/storage/statements.py. Every liveness decision uses now(), the instant the
-- transaction started: one instant per call, shared by a transaction's riders (§14.5, §17).
-- Each tenant has a key space of its own (migration 140): a call is one tenant's, its last
-- parameter (`:tenant` in a statement with named parameters).

-- name: kv_lock
-- Lock the rows of the keys a call writes or checks, in byte order, inserting a placeholder
-- (version 0, never live) for a key that has no row so that it has a lock too; answer each
-- row as it stands with a version drawn now, while its lock is held (§14.5: versions grow
-- per key). `created` tells a placeholder this call inserted (removed again when unused).
-- $1 namespaces, $2 keys (distinct pairs), $3 tenant
INSERT INTO queen.kv AS k (tenant, ns, key, value, version, expires_at, updated_at)
SELECT $3, t.ns, t.key, 'null', 0, '-infinity', now()
  FROM unnest($1::text[], $2::text[]) AS t(ns, key)
 ORDER BY t.ns COLLATE "C", t.key COLLATE "C"
    ON CONFLICT (tenant, ns, key) DO UPDATE SET version = k.version
RETURNING k.ns, k.key, k.value, k.version, queen.kv_iso(k.expires_at) AS expires_at,
          queen.kv_iso(k.updated_at) AS updated_at,
          (k.expires_at IS NULL OR k.expires_at > now()) AS live, (k.xmax = 0) AS created,
          nextval('queen.kv_versions') AS next_version, now() AS instant;

-- name: kv_get
-- The live rows among some keys, unlocked (timestamps as wire text, as in every read here).
-- $1 namespaces, $2 keys, $3 tenant
SELECT k.ns, k.key, k.value, k.version, queen.kv_iso(k.expires_at) AS expires_at,
       queen.kv_iso(k.updated_at) AS updated_at
  FROM unnest($1::text[], $2::text[]) AS t(ns, key)
  JOIN queen.kv k ON k.tenant = $3 AND k.ns = t.ns AND k.key = t.key
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
-- Up to $5 live rows of a namespace whose key starts with $2, in byte order, after $4
-- (exclusive; '' = from the start). $3 is the first string past every key with that prefix
-- (NULL when there is none to compute), so the index range ends there.
-- $1 namespace, $2 prefix, $3 upper bound or NULL, $4 after, $5 limit, $6 keys only,
-- $7 tenant
SELECT k.key, CASE WHEN $6::boolean THEN NULL ELSE k.value END AS value, k.version,
       queen.kv_iso(k.expires_at) AS expires_at, queen.kv_iso(k.updated_at) AS updated_at
  FROM queen.kv k
 WHERE k.tenant = $7 AND k.ns = $1 AND k.key >= $2 AND ($3::text IS NULL OR k.key < $3)
   AND k.key > $4 AND starts_with(k.key, $2)
   AND (k.expires_at IS NULL OR k.expires_at > now())
 ORDER BY k.key
 LIMIT $5;

-- name: kv_sweep
-- Delete up to $1 dead rows (expired, or placeholders), skipping rows a call holds: two
-- sweepers, or a sweeper and a writer, never wait for each other.
WITH dead AS (
    SELECT tenant, ns, key FROM queen.kv
     WHERE expires_at <= now()
     ORDER BY expires_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED)
DELETE FROM queen.kv k USING dead d
 WHERE k.tenant = d.tenant AND k.ns = d.ns AND k.key = d.key;

-- name: kv_namespaces
-- One page of namespaces with their live keys, value bytes and the keys expiring within $3
-- seconds, in byte order after $1 (exclusive, '' = from the start).
-- $1 after, $2 limit, $3 horizon in seconds, $4 tenant
SELECT ns, count(*) AS keys, coalesce(sum(octet_length(value)), 0) AS bytes,
       count(*) FILTER (WHERE expires_at <= now() + make_interval(secs => $3::double precision))
           AS expiring
  FROM queen.kv
 WHERE tenant = $4 AND ns > $1 AND (expires_at IS NULL OR expires_at > now())
 GROUP BY ns
 ORDER BY ns
 LIMIT $2;
