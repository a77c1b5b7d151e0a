-- A pop's answer keeps within a byte budget (QUEEN_POP_MAX_BYTES; functions/30_pop.sql,
-- queen.pop_ready). It counts a segment's frames as they go out, uncompressed: the append
-- records that size from the zstd frame's header (functions/20_append.sql,
-- queen.zstd_content_size). Null in a segment written before this version, or sealed
-- (encryptionEnabled): the pop counts its stored size instead.
ALTER TABLE queen.log_segments ADD COLUMN raw_bytes bigint;

-- queen.pop_ready takes the budget last; queen.pop_read, which read the spans' segments for
-- it, goes (pop_ready reads them itself, counting their bytes). The functions layer creates
-- the new signature.
DROP FUNCTION IF EXISTS queen.pop_ready(bigint, text, text, text, text, text, text, boolean,
                                        text, timestamptz, boolean, integer, integer,
                                        boolean, integer, integer, text, bigint[], boolean,
                                        integer);
DROP FUNCTION IF EXISTS queen.pop_read(text, bigint[], bigint[], bigint[]);
