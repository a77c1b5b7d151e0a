-- Version 90: ephemeral queues (wire-protocol-extensions §19).
--
-- Declarations live in a normal (WAL-logged) table: they survive every restart. Contents,
-- cursors, leases, counters and the epoch live in UNLOGGED tables: no WAL, so the hot verbs
-- need no fsync (§19.8 point 4), shared by every worker and every broker over this database
-- (points 1-2), and emptied by PostgreSQL's crash recovery (and empty on a promoted replica).
-- The epoch row is UNLOGGED too: when recovery empties the contents it empties the epoch
-- row with them, and the next call mints a new epoch from the logged counter, so an id
-- handed out before the loss acks `stale` and never `acked` (point 3). Sequence numbers come
-- from one UNLOGGED sequence, reset by a crash together with the epoch.

CREATE TABLE queen.eph_declared (
    queue text PRIMARY KEY,
    sent jsonb NOT NULL,             -- the options as the client sent them (echoed)
    max_bytes bigint NOT NULL,       -- the values in force (clamped, defaults filled in)
    max_length integer NOT NULL,
    policy text NOT NULL CHECK (policy IN ('reject', 'dropOldest')),
    ttl_seconds integer NOT NULL,
    lease_seconds integer NOT NULL,
    retry_limit integer NOT NULL,
    window_ms integer NOT NULL,
    window_count integer NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Epochs minted so far (one row, logged): a new epoch is always greater than every old one.
CREATE TABLE queen.eph_epochs_minted (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    last bigint NOT NULL
);
INSERT INTO queen.eph_epochs_minted (last) VALUES (0);

CREATE UNLOGGED TABLE queen.eph_epoch (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    epoch bigint NOT NULL
);

CREATE UNLOGGED SEQUENCE queen.eph_seq;

-- One row per live queue (implicit or declared) with its gauges; the lock of every call.
CREATE UNLOGGED TABLE queen.eph_queue (
    queue text PRIMARY KEY,
    depth integer NOT NULL DEFAULT 0,
    bytes bigint NOT NULL DEFAULT 0,
    drops_bounds bigint NOT NULL DEFAULT 0,
    drops_ttl bigint NOT NULL DEFAULT 0,
    drops_retry bigint NOT NULL DEFAULT 0,
    touched_at timestamptz NOT NULL DEFAULT now()
);

CREATE UNLOGGED TABLE queen.eph_partition (
    queue text NOT NULL,
    partition text NOT NULL,
    last_seq bigint NOT NULL DEFAULT 0,  -- the newest message pushed: a ring whose cursor
                                         -- is there has nothing for that group
    PRIMARY KEY (queue, partition)
);

-- Group names seen by pops (`__QUEUE_MODE__` for groupless pops).
CREATE UNLOGGED TABLE queen.eph_group (
    queue text NOT NULL,
    grp text NOT NULL,
    PRIMARY KEY (queue, grp)
);

-- A group's cursor on a ring: the seq of the last message delivered to it. No row = 0 =
-- before every held message: a group starts at the ring's head.
CREATE UNLOGGED TABLE queen.eph_cursor (
    queue text NOT NULL,
    partition text NOT NULL,
    grp text NOT NULL,
    last_seq bigint NOT NULL DEFAULT 0,
    skipped bigint NOT NULL DEFAULT 0,   -- messages evicted before this group reached them
    PRIMARY KEY (queue, partition, grp)
);

CREATE UNLOGGED TABLE queen.eph_message (
    queue text NOT NULL,
    partition text NOT NULL,
    seq bigint NOT NULL,
    payload text NOT NULL,               -- the JSON text as pushed, re-emitted byte for byte
    bytes integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, partition, seq)
);

-- A delivered, unsettled message of one group: leased until `expires_at`, or awaiting
-- redelivery once it passed (the sweep sets a passed lease to -infinity: "announced").
CREATE UNLOGGED TABLE queen.eph_lease (
    queue text NOT NULL,
    partition text NOT NULL,
    grp text NOT NULL,
    seq bigint NOT NULL,
    attempts integer NOT NULL,
    expires_at timestamptz NOT NULL,
    -- seq is unique deployment-wide within an epoch: it names the message alone, so
    -- lookups by a list of seqs are one index probe each (seq = ANY).
    PRIMARY KEY (queue, grp, seq)
);
CREATE INDEX eph_lease_expiry ON queen.eph_lease (expires_at);
-- A group's passed leases (redeliveries), by range: dead versions of settled leases, whose
-- expiry lies ahead, are never walked.
CREATE INDEX eph_lease_due ON queen.eph_lease (queue, grp, expires_at);
CREATE INDEX eph_lease_message ON queen.eph_lease (queue, seq);

-- The functions of the verbs (queen.eph_*): schema/functions/80_ephemeral.sql.
