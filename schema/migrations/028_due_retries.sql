-- Version 28: the reaper announces retried spans when their retryDelay has passed.
--
-- A `failed` or `retry` ack releases its span with a not-before time (queen.ack) and wakes
-- nobody then. Parked long polls used to find such a span on a backoff re-check; they now
-- skip re-checks while nothing is announced (core/engine/reads/quiet.py), so the reaper clears the
-- not-before times that have passed and announces those partitions, as it does for expired
-- leases (queries/reaper.sql, reaper_due_retries). Only cursors with a pending not-before
-- time are indexed: the index stays as small as the retries in flight.
CREATE INDEX log_consumers_not_before ON queen.log_consumers (not_before)
    WHERE not_before IS NOT NULL;
