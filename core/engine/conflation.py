"""Conflation: last-value delivery for a consumer group (wire-protocol-extensions §20.1-20.4).

A group declares it with `conflation=true` on its first pop of a queue; the policy is stored
with the group's subscription record and wins for every later pop (schema/functions/30_pop.sql,
where the claim delivers one message per partition, the newest visible, under a lease that
covers every message after the cursor). This module holds the request rules around it: the
refusals, the width a conflating pop claims, and the effective policy an answer reports,
looked up when no claim ran (pops paused, the client gone, the database unreachable).
"""

from __future__ import annotations

from core.engine.pop import QUEUE_MODE, PopRequest, PopResult
from core.errors import BadRequest
from core.storage import conflation as sql
from core.storage.database import Database

WIDTH_MAX = 64


def check_conflation(*, declared: bool, group: str, auto_ack: bool) -> None:
    """The 400s of §20.1: conflation needs a named group and a lease (no autoAck)."""
    if not declared:
        return
    if group in ("", QUEUE_MODE):
        raise BadRequest("conflation requires a named consumerGroup")
    if auto_ack:
        raise BadRequest("conflation cannot be combined with autoAck")


def conflation_width(partitions: int | None, batch: int) -> int:
    """Partitions a conflating pop claims without the autopilot: `partitions` if sent, else
    its batch, 1..64 (extensions decision 13)."""
    return min(max(batch if partitions is None else partitions, 1), WIDTH_MAX)


async def effective(db: Database, request: PopRequest, result: PopResult) -> bool:
    """Whether the group conflates on what the pop addressed: what its claim found, else
    the stored record, else (no record yet: the first pop will store it) the declaration.
    A long poll that ended on a database outage goes by the declaration: looking the record
    up would wait for the same outage again, past the poll's deadline (a declaring pop is
    answered as conflating all the same, which is what its client checks)."""
    if result.conflation is not None:
        return result.conflation
    if request.group == QUEUE_MODE:
        return False
    if result.unreachable:
        return request.conflation
    async with db.session() as conn:
        stored = await sql.policy(conn, tenant=request.tenant, queue=request.queue, namespace=request.namespace,
                                  task=request.task, group=request.group)
    return request.conflation if stored is None else stored
