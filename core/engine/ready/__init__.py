"""The ready set: per (queue, group), the partitions this process knows may be claimable."""
