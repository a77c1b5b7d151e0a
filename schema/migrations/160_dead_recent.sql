-- The analytics sampling pass counts the dead letters written since the previous pass by
-- their stamp (schema/queries/stats.sql, stats_sample_*). A stamp is the writing
-- transaction's start, so a dead letter whose transaction began before a pass and committed
-- after it was counted by no pass. Each pass now also counts the dead letters stamped in the
-- last minute before it and keeps that count here; the next pass counts every dead letter
-- stamped since a minute before the previous pass, minus this. Null in a baseline written
-- before this version: the next pass counts as before, since the previous pass.
ALTER TABLE queen.stats_baseline ADD COLUMN dead_recent bigint;
