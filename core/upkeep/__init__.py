"""Work beside the request path: the reaper's maintenance passes, the durable push spool,
and the counters and samples behind the metrics."""
