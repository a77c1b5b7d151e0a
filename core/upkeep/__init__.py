"""Work beside the request path: the reaper's maintenance passes, and the samples and
counter flushes behind the metrics."""
