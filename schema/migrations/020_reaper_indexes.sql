-- Version 20: what the reaper needs to find old rows without scanning whole tables.
-- (Numbered apart from the 00x series so it cannot collide with migrations being written in
-- parallel; versions are applied in order and need not be contiguous.)

-- Index rows are inserted in created_at order, so a BRIN index summarises the heap in a few
-- pages and costs the write path almost nothing, yet lets the pruning scan skip every block
-- that holds only rows still inside the dedup window.
CREATE INDEX log_txn_index_created_brin ON queen.log_txn_index USING brin (created_at);
