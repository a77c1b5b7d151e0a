"""Queue management: configure (create or update options) and delete with everything owned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core import options
from core.engine import encryption
from core.errors import BadRequest
from core.ids import QueueId
from core.storage import traces
from core.storage import writes as sql
from core.storage.database import Database


@dataclass(frozen=True, slots=True)
class QueueConfig:
    queue_id: QueueId
    name: str
    namespace: str
    task: str
    options: dict[str, Any]  # every option, wire names, in echo order


async def configure(db: Database, *, tenant: str, queue: str, namespace: str | None,
                    task: str | None, given: dict[str, Any], replace: bool) -> QueueConfig:
    """Create the tenant's queue if missing and apply `given` options (merge, or replace)."""
    if options.validate(given).get("encryptionEnabled") and encryption.cipher() is None:
        # Nothing stored: a setting that claims to protect data and cannot is refused.
        raise BadRequest(f"encryptionEnabled needs {encryption.ENV_NAME} (64 hex characters) "
                         f"set on the broker; it is not set, so nothing was configured")
    derived_ns, derived_task = options.derive_namespace_task(queue)
    async with db.transaction() as conn:
        row = await sql.lock_queue(conn, tenant=tenant, name=queue)
        if row is None:
            await sql.insert_queue(conn, tenant=tenant, name=queue, namespace=derived_ns,
                                   task=derived_task, options=options.DEFAULTS_JSON)
            row = await sql.lock_queue(conn, tenant=tenant, name=queue)
        assert row is not None
        effective = options.apply(options.decode(row.options).as_dict(), given,
                                  replace=replace)
        ns = row.namespace if namespace is None else namespace
        tk = row.task if task is None else task
        await sql.update_queue(conn, queue_id=row.id, namespace=ns, task=tk,
                               options=options.encode(effective))
    return QueueConfig(QueueId(row.id), queue, ns, tk, effective)


async def delete_queue(db: Database, queue: str, *, tenant: str) -> bool:
    """Delete the tenant's queue and all it owns in one transaction; answer whether it
    existed."""
    async with db.transaction() as conn:
        queue_id = await sql.delete_queue_row(conn, tenant=tenant, name=queue)
        if queue_id is None:
            return False
        await sql.delete_queue_directory(conn, queue_id=queue_id)
        partition_ids = await sql.delete_queue_partitions(conn, queue_id=queue_id)
        await sql.delete_partition_data(conn, partition_ids=partition_ids)
        await traces.delete_partitions(conn, partition_ids=partition_ids)
        await sql.delete_queue_subscriptions(conn, queue_id=queue_id)
    return True
