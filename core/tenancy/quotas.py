"""A tenant's quota: its rate limits and caps, as stored in `queen.tenant_quotas`.

Every limit is optional (None: unlimited); a tenant without a row has none. The names on
the wire (the admin API, the CLI) are camelCase, in `FIELDS` order; Queen's proxy calls the
same limits max_req_per_sec, req_burst, max_msgs_per_sec, msgs_burst, max_payload_bytes,
max_batch_items, max_queues, max_partitions_per_queue, max_retention_seconds,
max_parked_pops and max_retained_bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import BadRequest


@dataclass(frozen=True, slots=True)
class Quota:
    requests_per_second: float | None = None  # token bucket: requests of any route
    request_burst: int | None = None  # its capacity (default twice the rate)
    messages_per_second: float | None = None  # token bucket: messages written
    message_burst: int | None = None
    max_payload_bytes: int | None = None  # one message's payload
    max_batch_size: int | None = None  # messages in one push (or transaction)
    max_queues: int | None = None
    max_partitions_per_queue: int | None = None
    max_retention_seconds: int | None = None  # nothing older is kept (reaper), 403 above
    max_parked_pops: int | None = None  # long polls waiting at once
    max_stored_bytes: int | None = None  # 403 to writes once stored bytes reach it

    @property
    def limits_names(self) -> bool:
        """Whether creating a queue or a partition is limited (core/tenancy/catalog.py)."""
        return self.max_queues is not None or self.max_partitions_per_queue is not None

    def as_wire(self) -> dict[str, float | int | None]:
        return {wire: getattr(self, name) for name, wire in FIELDS}


# (attribute, wire name), in the order of the table's columns
FIELDS: tuple[tuple[str, str], ...] = (
    ("requests_per_second", "requestsPerSecond"),
    ("request_burst", "requestBurst"),
    ("messages_per_second", "messagesPerSecond"),
    ("message_burst", "messageBurst"),
    ("max_payload_bytes", "maxPayloadBytes"),
    ("max_batch_size", "maxBatchSize"),
    ("max_queues", "maxQueues"),
    ("max_partitions_per_queue", "maxPartitionsPerQueue"),
    ("max_retention_seconds", "maxRetentionSeconds"),
    ("max_parked_pops", "maxParkedPops"),
    ("max_stored_bytes", "maxStoredBytes"),
)
WIRE_NAMES = tuple(wire for _, wire in FIELDS)
_RATES = ("requests_per_second", "messages_per_second")
# The columns are integer (int4) but for these bigint ones.
_BIG = ("max_retention_seconds", "max_stored_bytes")
_INT4_MAX = 2**31 - 1
_INT8_MAX = 2**63 - 1


def quota_from_wire(body: Mapping[str, Any], *, base: Quota | None = None) -> Quota:
    """A quota from wire names: every limit given replaces `base`'s (JSON null: unlimited);
    a limit not named keeps `base`'s. BadRequest names a wrong name or value."""
    unknown = sorted(set(body) - set(WIRE_NAMES))
    if unknown:
        raise BadRequest(f"unknown quota field {unknown[0]!r}; the fields are "
                         f"{', '.join(WIRE_NAMES)}")
    changes: dict[str, Any] = {}
    for name, wire in FIELDS:
        if wire in body:
            changes[name] = _limit(wire, body[wire], rate=name in _RATES, big=name in _BIG)
    return dataclasses.replace(base or Quota(), **changes)


def _limit(wire: str, value: Any, *, rate: bool, big: bool) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{wire} must be a positive number or null (unlimited)")
    if rate:
        if not 0 < value < float("inf"):  # NaN compares false: refused too
            raise BadRequest(f"{wire} must be above 0 (or null: unlimited)")
        return float(value)
    if isinstance(value, float) and not value.is_integer():
        raise BadRequest(f"{wire} must be a whole number")
    number = int(value)
    if number < 1 or number > (_INT8_MAX if big else _INT4_MAX):
        raise BadRequest(f"{wire} must be from 1 to {_INT8_MAX if big else _INT4_MAX} "
                         "(or null: unlimited)")
    return number
