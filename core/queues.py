"""Queue management: configure (create or update options) and delete with everything owned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from core import options
from core.db import Database, storage_errors
from core.ids import QueueId
from core.queries import QUERIES


@dataclass(frozen=True, slots=True)
class QueueConfig:
    queue_id: QueueId
    name: str
    namespace: str
    task: str
    options: dict[str, Any]


async def configure(db: Database, *, queue: str, namespace: str | None, task: str | None,
                    given: dict[str, Any], replace: bool) -> QueueConfig:
    """Create the queue if missing and apply `given` options (merge, or replace)."""
    options.validate(given)  # reject bad values before touching the database
    derived_ns, derived_task = options.derive_namespace_task(queue)
    async with db.transaction() as conn:
        with storage_errors():
            row = await conn.fetchrow(QUERIES["lock_queue_options"], queue)
            if row is None:
                await conn.execute(
                    QUERIES["insert_queue"], queue, derived_ns, derived_task,
                    msgspec.json.encode(options.DEFAULTS).decode())
                row = await conn.fetchrow(QUERIES["lock_queue_options"], queue)
            assert row is not None
            current = msgspec.json.decode(row["options"])
            effective = options.apply(current, given, replace=replace)
            ns = row["namespace"] if namespace is None else namespace
            tk = row["task"] if task is None else task
            await conn.execute(QUERIES["update_queue"], row["id"], ns, tk,
                               msgspec.json.encode(effective).decode())
    return QueueConfig(QueueId(row["id"]), queue, ns, tk, effective)


async def delete_queue(db: Database, queue: str) -> bool:
    """Delete the queue and all it owns in one transaction; answer whether it existed."""
    async with db.transaction() as conn:
        with storage_errors():
            queue_id = await conn.fetchval(QUERIES["delete_queue_row"], queue)
            if queue_id is None:
                return False
            partition_ids = [r["id"] for r in await conn.fetch(
                QUERIES["delete_queue_partitions"], queue_id)]
            await conn.execute(QUERIES["delete_partition_data"], partition_ids)
            await conn.execute(QUERIES["delete_queue_subscriptions"], queue_id)
    return True

