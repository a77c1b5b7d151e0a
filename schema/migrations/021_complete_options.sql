-- Version 21: every queue row holds every option with its effective value.
-- Option defaults are settled in one place (core/engine/options.py, QueueOptions), which writes the
-- complete set whenever it creates or configures a queue; SQL reads `options ->> 'key'`
-- without restating any default. This fills in rows written before, with the defaults of
-- the time (wire-protocol §4.9).
UPDATE queen.queues
   SET options = '{"leaseTime": 300, "retryLimit": 3, "dlqAfterMaxRetries": true,
                   "deadLetterQueue": true, "dedupWindowSeconds": 3600,
                   "retentionSeconds": 0, "completedRetentionSeconds": 0,
                   "retentionEnabled": false, "delayedProcessing": 0, "windowBuffer": 0,
                   "maxSize": 0, "retryDelay": 1000, "ttl": 3600, "priority": 0,
                   "encryptionEnabled": false, "maxWaitTimeSeconds": 0,
                   "minPopWaitTime": 0}'::jsonb || options;
