"""Ephemeral queues (wire-protocol-extensions §19): bounded, non-durable queues whose contents
live in UNLOGGED PostgreSQL tables shared by every worker and broker (see
docs/guide/ephemeral.md). `Ephemeral` (service.py) is the service `core.service.Broker`
composes. The package itself names only the refusals: its rules (model.py) are imported by
the storage's typed calls, which service.py imports in turn."""

from core.ephemeral.errors import (
    EphemeralBadRequest,
    EphemeralError,
    EphemeralQueueNotFound,
    EphemeralUnavailable,
    QueueFull,
)

__all__ = ["EphemeralBadRequest", "EphemeralError", "EphemeralQueueNotFound",
           "EphemeralUnavailable", "QueueFull"]
