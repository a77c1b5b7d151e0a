"""Cross-process wake-ups for parked long polls: PostgreSQL LISTEN/NOTIFY.

Anything that makes messages deliverable in a queue (a push commit, a lease expiry or
release, a DLQ replay, a seek) notifies channel `queen_wakeup` with payload `"<queue id>"`,
`"<queue id>:<n>"` or `"<queue id>:<n>:<partition id>,..."`: n is how many spans became
deliverable, the partition ids (when known) say where. Each web process LISTENs on one
connection and wakes up to n parked pops of that queue per consumer group, handing them the
partition ids so they can claim those first instead of scanning the queue.

The notification is sent *after* the data commit, in its own statement: NOTIFY inside a
writing transaction serialises commits on a global lock held through the WAL flush, which
would undo group commit for the whole write path.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.storage import notify
from core.storage.statements import Conn

CHANNEL = "queen_wakeup"
# What became deliverable: one span in a queue, in a known partition or not.
Wake = tuple[int, int | None]

MAX_HINTS = 32  # partition ids carried by one notification (payloads stay far below 8000 B)


def encode_payload(queue_id: int, count: int, partitions: Iterable[int] = ()) -> str:
    hints = ",".join(str(p) for p in list(partitions)[:MAX_HINTS])
    if hints:
        return f"{queue_id}:{count}:{hints}"
    return str(queue_id) if count == 1 else f"{queue_id}:{count}"


def decode_payload(payload: str) -> tuple[int, int, list[int]]:
    """(queue id, count, partition ids); raises ValueError for anything else."""
    queue, _, rest = payload.partition(":")
    count, _, hints = rest.partition(":")
    partitions = [int(p) for p in hints.split(",")] if hints else []
    return int(queue), max(1, int(count)) if count else 1, partitions


async def notify_hinted(conn: Conn, queues: dict[int, tuple[int, list[int]]]) -> None:
    """Wake parked pops in every broker process (one autocommitted statement): per queue,
    how many spans became deliverable and in which partitions (when known)."""
    if queues:
        await notify.notify_wakeups(
            conn, channel=CHANNEL,
            payloads=[encode_payload(q, n, parts) for q, (n, parts) in sorted(queues.items())])
