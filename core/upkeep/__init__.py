"""Work beside the request path: the reaper's maintenance passes, the durable push spool,
and the samples and counter flushes behind the metrics."""
