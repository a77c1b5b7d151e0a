"""The log engine: pushes appended as segments through the per-partition coalescer, pops
that claim spans under leases from the ready set (`ready/`), acks that commit offsets,
transactions over both, and the wake-ups that tell parked long polls something became
deliverable; `batching/` sends the acks and lease extensions of concurrent requests as one
statement per flush, and the push spool (`spool.py`) keeps on disk what the database cannot
take now."""
