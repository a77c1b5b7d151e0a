"""The broker's core: storage, the write coalescer, reads, leases and the reaper.

Nothing here knows about HTTP; `broker/` is the edge that calls into it.
"""
