"""Queries of the analytics family (`/api/v1/analytics/*`, broker/routes/analytics.py).

Every route takes `from` and `to` (ISO-8601; default: the hour up to now). The process
routes also take `hostname` and `workerId` (a process id: our workers are processes); the
queue routes `queue` (and `namespace`, `task`). Their answers are free-form JSON in Queen's
shapes, built by broker/routes/analytics.py.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import UNSET, Meta, UnsetType

from broker.wire.common import WindowQuery
from broker.wire.types import Name, Text


class ProcessQuery(WindowQuery):
    hostname: Text | UnsetType = UNSET
    workerId: Annotated[int, Meta(ge=0)] | UnsetType = UNSET


class QueueWindowQuery(WindowQuery):
    queue: Name | UnsetType = UNSET
    namespace: Name | UnsetType = UNSET
    task: Name | UnsetType = UNSET


class QueueLagPoint(msgspec.Struct):
    """One queue over one bucket of `/api/v1/analytics/queue-lag` (a bare array of these)."""

    queueName: str
    popCount: int  # messages delivered
    avgLagMs: int  # the sampled lag: average and largest over the bucket's samples
    maxLagMs: int
    bucketMinutes: int
    bucketTime: str
    # The queue's tenant, for a named tenant's queue (absent for the default tenant's, so a
    # deployment without tenants answers as before), as on /metrics/prometheus.
    tenant: str | UnsetType = UNSET
