"""Cross-process wake-ups for parked long polls: PostgreSQL LISTEN/NOTIFY.

Anything that makes messages deliverable in a queue (a push commit, a lease expiry or
release, a DLQ replay, a seek) notifies channel `queen_wakeup` with payload `"<queue id>"`,
`"<queue id>:<n>"`, `"<queue id>:<n>:<partition id>,..."` or
`"<queue id>:<n>:<partition ids>:<group>=<k>,..."`: n is how many spans became deliverable,
the partition ids (when known) say where, and k says how many of them a waiting pop of that
group in the sending process was already woken for (group names percent-encoded). Each web
process LISTENs on one connection and wakes up to n parked pops of that queue per consumer
group (n - k for a group the sender served), handing them the partition ids so they can
claim those first instead of scanning the queue. Without the k, every span woke one pop of
the group in each process, and all but one of them ran an empty claim.

The notification is sent *after* the data commit, in its own statement: NOTIFY inside a
writing transaction serialises commits on a global lock held through the WAL flush, which
would undo group commit for the whole write path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import quote, unquote

from core.storage import notify
from core.storage.statements import Conn

CHANNEL = "queen_wakeup"
# What became deliverable: one span in a queue, in a known partition or not.
Wake = tuple[int, int | None]

MAX_HINTS = 32  # partition ids carried by one notification (payloads stay far below 8000 B)
MAX_SERVED_BYTES = 2000  # room for served groups; groups left out are simply woken again


def encode_payload(queue_id: int, count: int, partitions: Iterable[int] = (),
                   served: Mapping[str, int] | None = None) -> str:
    hints = ",".join(str(p) for p in list(partitions)[:MAX_HINTS])
    groups = _encode_served(served or {})
    if groups:
        return f"{queue_id}:{count}:{hints}:{groups}"
    if hints:
        return f"{queue_id}:{count}:{hints}"
    return str(queue_id) if count == 1 else f"{queue_id}:{count}"


def decode_payload(payload: str) -> tuple[int, int, list[int], dict[str, int]]:
    """(queue id, count, partition ids, served counts by group); raises ValueError for
    anything else."""
    queue, _, rest = payload.partition(":")
    count, _, rest = rest.partition(":")
    hints, _, groups = rest.partition(":")
    partitions = [int(p) for p in hints.split(",")] if hints else []
    served: dict[str, int] = {}
    for item in groups.split(",") if groups else []:
        group, eq, k = item.rpartition("=")
        if not eq:
            raise ValueError(f"bad served group {item!r}")
        served[unquote(group)] = int(k)
    return int(queue), max(1, int(count)) if count else 1, partitions, served


def _encode_served(served: Mapping[str, int]) -> str:
    items: list[str] = []
    size = 0
    for group, k in sorted(served.items()):
        if k <= 0:
            continue
        item = f"{quote(group, safe='')}={k}"
        size += len(item) + 1
        if size > MAX_SERVED_BYTES:
            break  # not named: the receiver wakes that group as if nobody had been woken
        items.append(item)
    return ",".join(items)


Announcement = tuple[int, list[int], dict[str, int]]  # count, partition ids, served by group


async def notify_hinted(conn: Conn, queues: Mapping[int, Announcement]) -> None:
    """Wake parked pops in every broker process (one autocommitted statement): per queue,
    how many spans became deliverable, in which partitions (when known), and for how many of
    them each group already had a pop woken here."""
    if queues:
        await notify.notify_wakeups(
            conn, channel=CHANNEL,
            payloads=[encode_payload(q, n, parts, served)
                      for q, (n, parts, served) in sorted(queues.items())])
