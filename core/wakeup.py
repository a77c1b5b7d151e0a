"""Cross-process wake-ups for parked long polls: PostgreSQL LISTEN/NOTIFY.

Anything that makes messages deliverable in a queue (a push commit, a lease expiry or
release, a DLQ replay, a seek) notifies channel `queen_wakeup` with the queue id as payload.
Each web process LISTENs on one connection and wakes the pops parked on that queue.

The notification is sent *after* the data commit, in its own statement: NOTIFY inside a
writing transaction serialises commits on a global lock held through the WAL flush, which
would undo group commit for the whole write path.
"""

from __future__ import annotations

import asyncpg

CHANNEL = "queen_wakeup"


async def notify_queues(conn: asyncpg.Connection, queue_ids: list[int]) -> None:
    """Wake parked pops of these queues in every broker process (one autocommitted call)."""
    if queue_ids:
        await conn.execute(
            "SELECT pg_notify($1, q::text) FROM unnest($2::bigint[]) AS q", CHANNEL,
            sorted(set(queue_ids)))
