"""Ephemeral queues (wire-protocol-extensions §19): bounded, non-durable queues whose contents
live in UNLOGGED PostgreSQL tables shared by every worker and broker (see
docs/guide/ephemeral.md). `Ephemeral` is the service `core.service.Broker` composes."""

from core.ephemeral.errors import (
    EphemeralBadRequest,
    EphemeralError,
    EphemeralQueueNotFound,
    EphemeralUnavailable,
    QueueFull,
)
from core.ephemeral.service import Ephemeral, Totals

__all__ = ["Ephemeral", "EphemeralBadRequest", "EphemeralError", "EphemeralQueueNotFound",
           "EphemeralUnavailable", "QueueFull", "Totals"]
