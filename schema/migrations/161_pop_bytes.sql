-- A pop's answer keeps within a byte budget (QUEEN_POP_MAX_BYTES; functions/30_pop.sql,
-- queen.pop_ready). It counts a segment's frames as they go out, uncompressed: the append
-- records that size from the zstd frame's header (functions/20_append.sql,
-- queen.zstd_content_size). Null in a segment written before this version, or sealed
-- (encryptionEnabled): the pop counts its stored size instead.
ALTER TABLE queen.log_segments ADD COLUMN raw_bytes bigint;

-- queen.pop_ready gains the budget as a last argument (a new signature beside the old one,
-- which now calls it, so brokers of the previous version keep popping during a rolling
-- upgrade); queen.pop_read, which read the spans' segments for the old one, goes (pop_ready
-- reads them itself, counting their bytes).
DROP FUNCTION IF EXISTS queen.pop_read(text, bigint[], bigint[], bigint[]);
