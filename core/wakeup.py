"""Cross-process wake-ups for parked long polls: PostgreSQL LISTEN/NOTIFY.

Anything that makes messages deliverable in a queue (a push commit, a lease expiry or
release, a DLQ replay, a seek) notifies channel `queen_wakeup` with payload `"<queue id>"` or
`"<queue id>:<n>"`, n being how many spans became deliverable. Each web process LISTENs on one
connection and wakes up to n parked pops of that queue per consumer group.

The notification is sent *after* the data commit, in its own statement: NOTIFY inside a
writing transaction serialises commits on a global lock held through the WAL flush, which
would undo group commit for the whole write path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import asyncpg

CHANNEL = "queen_wakeup"


async def notify_queues(conn: asyncpg.Connection, queue_ids: Iterable[int]) -> None:
    """Wake parked pops of these queues in every broker process (one autocommitted call).
    A queue id listed n times wakes up to n pops per group."""
    counts = Counter(queue_ids)
    if counts:
        await conn.execute(
            "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", CHANNEL,
            [encode_payload(q, n) for q, n in sorted(counts.items())])


def encode_payload(queue_id: int, count: int) -> str:
    return str(queue_id) if count == 1 else f"{queue_id}:{count}"


def decode_payload(payload: str) -> tuple[int, int]:
    """(queue id, count); raises ValueError for anything else."""
    queue, _, count = payload.partition(":")
    return int(queue), max(1, int(count)) if count else 1
