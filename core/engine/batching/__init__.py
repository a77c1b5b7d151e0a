"""Batching: acks and lease extensions of concurrent requests go to
PostgreSQL as one statement per flush (`batcher.KeyedBatcher`, used by `acks.AckFlusher`
and `acks.ExtendFlusher`)."""
