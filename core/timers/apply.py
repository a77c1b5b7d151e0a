"""`apply_timer_ops`: one call's timer ops in the caller's transaction (§16.2, §17).

The route runs it in a transaction of its own; the transaction rider (§17) runs it in the
bundle's, after the KV ops and before the pushes and acks (the lock order is KV rows, timer
rows, queues, partitions). Ops are applied in byte order of (queue, timerKey), so two calls
lock shared rows in one order, and answered in input order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.engine import encryption
from core.errors import Refused
from core.ids import uuid7
from core.storage import timers as sql
from core.storage.statements import Conn
from core.timefmt import iso
from core.timers.ops import BAD, TimerOp

Element = dict[str, Any]  # one result element, as the wire shows it


@dataclass(slots=True)
class AppliedTimers:
    results: list[Element]  # one per op, in input order
    scheduled: int
    cancelled: int
    soonest_delay_ms: int | None  # of the schedules: wake the sweeper when it is soon


async def apply_timer_ops(conn: Conn, ops: Sequence[TimerOp], *, now: datetime | None,
                          producer_sub: str | None, tenant: str = "") -> AppliedTimers:
    """Apply `ops` (validated: core/timers/ops.py) to the tenant's timers at `now` (None:
    the transaction's `now()`), as `producer_sub`. A schedule for an encryptionEnabled queue is sealed here
    (when this process has the key); `encrypted: true` for such a queue is refused
    (`timers_encrypted_conflict`) before anything is applied."""
    if not ops:
        return AppliedTimers([], 0, 0, None)
    schedules = [op for op in ops if op.kind == "schedule"]
    sealed_queues = (await sql.encrypted_queues(conn, tenant=tenant,
                                                queues=sorted({o.queue for o in schedules}))
                     if schedules else set())
    for i, op in enumerate(ops):
        if op.kind == "schedule" and op.encrypted and op.queue in sealed_queues:
            raise Refused(BAD, "timers_encrypted_conflict",
                          f"operations[{i}]: queue {op.queue!r} is encrypted by the broker; "
                          "send the payload without encrypted: true")
    cipher = encryption.cipher()
    order = sorted(range(len(ops)), key=lambda i: (ops[i].queue.encode(), ops[i].key.encode()))
    writes: list[sql.TimerWrite] = []
    ids: dict[int, str] = {}
    for i in order:
        op = ops[i]
        if op.kind == "cancel":
            writes.append(sql.TimerWrite(True, op.queue, op.key, txn=op.txn))
            continue
        message_id = uuid7()
        ids[i] = str(message_id)
        payload, sealed = op.payload, False
        if op.queue in sealed_queues and cipher is not None:
            payload, sealed = cipher.seal(op.payload, op.queue, op.partition), True
        writes.append(sql.TimerWrite(False, op.queue, op.key, op.partition, op.delay_ms,
                                     op.txn, message_id, payload, op.zstd,
                                     op.encrypted or sealed, sealed))
    rows = await sql.apply(conn, tenant=tenant, now=now, ops=writes, producer_sub=producer_sub)
    results: list[Element | None] = [None] * len(ops)
    for i, row in zip(order, rows):
        op = ops[i]
        element: Element = {"ok": row.status != "absent", "status": row.status,
                            "queue": op.queue, "timerKey": op.key, "txn": row.txn}
        if op.kind == "schedule":
            assert row.deliver_at is not None
            element["messageId"] = ids[i]
            element["deliverAt"] = iso(row.deliver_at)
        results[i] = element
    return AppliedTimers([r for r in results if r is not None], len(schedules),
                   sum(1 for r in rows if r.status == "cancelled"),
                   min((o.delay_ms for o in schedules), default=None))
