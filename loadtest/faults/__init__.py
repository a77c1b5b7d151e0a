"""The fault suite: the ledger under faults, the DLQ variant, two brokers over one database,
and the soak (docs/architecture/reliability.md). `python -m loadtest faults --help`, `python -m loadtest soak`."""
