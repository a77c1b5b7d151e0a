"""Typed calls of the conflation policy statements (schema/queries/conflation.sql)."""

from __future__ import annotations

from core.storage.statements import Conn, Statement

_POLICY = Statement[None]("conflation_policy")


async def policy(conn: Conn, *, tenant: str, queue: str | None, namespace: str | None,
                 task: str | None, group: str) -> bool | None:
    found = await _POLICY.value(conn, queue=queue, namespace=namespace, task=task, group=group,
                                tenant=tenant)
    return None if found is None else bool(found)


_OF_QUEUE = Statement[None]("conflation_of_queue")


async def of_queue(conn: Conn, *, queue_id: int, group: str) -> bool:
    return bool(await _OF_QUEUE.value(conn, queue_id=queue_id, group=group))
