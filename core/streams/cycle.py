"""What a cycle carries, and the transactionIds of its sink pushes.

A sink push the client sent without a transactionId gets one derived from the cycle's
content instead of a fresh one: the query, the source partition, the ack (lease,
transactionId, count; or "idle"), every state op, the push's position in the cycle, its
queue, partition and payload. A cycle resent after a commit whose answer was lost carries
the same content, so its pushes meet their first copies in the sink's dedup window and are
not written twice; two different cycles differ in at least their ack or their state ops
(an idle flush that emits a window deletes that window's state key).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

MAX_STATE_OPS = 4096  # per cycle (the KV store's call budget, §14 decision 1)
MAX_STATE_VALUE_BYTES = 1 << 20  # one state value's JSON text
MAX_KEY_BYTES = 4096  # one state key


@dataclass(frozen=True, slots=True)
class StateOp:
    delete: bool
    key: str
    value: str  # JSON text (ignored for a delete)


@dataclass(frozen=True, slots=True)
class CycleAck:
    lease_id: str
    ok: bool
    release: bool
    count: int
    transaction_id: str | None


@dataclass(slots=True)
class CyclePush:
    queue: str
    partition: str
    payload: bytes  # JSON as sent
    transaction_id: str | None = None
    message_id: uuid.UUID | None = None


@dataclass(slots=True)
class Cycle:
    query_id: str
    partition_id: str
    group: str
    ops: Sequence[StateOp]
    pushes: Sequence[CyclePush]
    ack: CycleAck | None
    producer_sub: str | None = None


@dataclass(slots=True)
class SinkResult:
    queue: str
    partition: str
    queued: int = 0
    duplicate: int = 0
    message_ids: list[str] = field(default_factory=list)


@dataclass(slots=True)
class CycleResult:
    success: bool
    error: str | None = None
    source_queue: str | None = None
    state_ops_applied: int = 0
    sinks: list[SinkResult] = field(default_factory=list)
    ack_count: int = 0
    lease_released: bool = False


def derived_transaction_ids(cycle: Cycle) -> list[str]:
    """One transactionId per push (see the module docstring); a push that names one keeps
    it."""
    base = hashlib.sha256()
    for part in (cycle.query_id, cycle.partition_id):
        base.update(part.encode())
        base.update(b"\0")
    ack = cycle.ack
    if ack is None:
        base.update(b"idle\0")
    else:
        base.update(f"{ack.lease_id}\0{ack.transaction_id}\0{ack.count}\0{ack.ok}\0"
                    f"{ack.release}\0".encode())
    for op in cycle.ops:
        base.update(b"d" if op.delete else b"u")
        base.update(op.key.encode())
        base.update(b"\0")
        if not op.delete:
            base.update(op.value.encode())
        base.update(b"\0")
    out: list[str] = []
    for index, push in enumerate(cycle.pushes):
        if push.transaction_id:
            out.append(push.transaction_id)
            continue
        h = base.copy()
        h.update(f"{index}\0{push.queue}\0{push.partition}\0".encode())
        h.update(push.payload)
        out.append(str(uuid.UUID(bytes=h.digest()[:16])))
    return out
