-- Version 23: dead letters refer to a preserved copy of their segment.
--
-- The ack that dead-letters a message runs inside PostgreSQL (one statement per ack), which
-- cannot decompress zstd. So instead of a payload copy, a dead letter records the base offset
-- of the segment holding it, and the segment's blob is copied once into log_dlq_segments
-- (shared by every dead letter of that segment); the frame is extracted when the dead letter
-- is read. The copy outlives retention and queue-independent cleanup of log_segments.
-- Rows written before keep their payload, message id, trace id and producer columns; rows
-- written from now on leave them null and set segment_base.
ALTER TABLE queen.log_dlq
    ALTER COLUMN payload DROP NOT NULL,
    ALTER COLUMN message_id DROP NOT NULL,
    ADD COLUMN segment_base bigint;       -- base offset of the preserved segment copy

CREATE TABLE queen.log_dlq_segments (
    partition_id bigint NOT NULL,
    base_offset  bigint NOT NULL,
    created_at   timestamptz NOT NULL,    -- the segment's append time
    blob         bytea NOT NULL,          -- the segment's blob, as stored
    PRIMARY KEY (partition_id, base_offset)
);
ALTER TABLE queen.log_dlq_segments ALTER COLUMN blob SET STORAGE EXTERNAL;
-- Which copies are still referenced (clean-up after a replay or a delete).
CREATE INDEX log_dlq_segment_ref_idx ON queen.log_dlq (partition_id, segment_base)
    WHERE segment_base IS NOT NULL;
