"""Cross-process wake-ups for parked long polls: PostgreSQL LISTEN/NOTIFY.

Anything that makes messages deliverable in a queue (a push commit, a lease expiry or
release, a DLQ replay, a seek) notifies channel `queen_wakeup` with payload `"<queue id>"`,
`"<queue id>:<n>"` or `"<queue id>:<n>:<partition id>,..."`: the partition ids say where
(at most MAX_HINTS), n counts them plus the wakes that could not be named, so a reader told
fewer names than n knows it was not told everything. Each web process LISTENs on one
connection, hands the partition ids to its ready set (core/engine/ready; a notification that
names fewer than n makes the queue's lanes reseed) and wakes up to n parked pops of that
queue per consumer group.

A fourth field, `"<queue id>:<n>:<partition ids>:<group>=<k>,..."`, says how many of those
spans the notifying process already handed to pops of its own, per consumer group: those
groups' waiters elsewhere wake only for the rest (n - k), so that one push does not wake one
pop per process, all racing for the same span and all but one finding nothing. A group is
named by a short digest (`group_token`); two groups sharing one only means one of them is
woken less and finds the data at its next look. A process that cannot read the fourth field
(an older version, mid-upgrade) ignores the whole notification; its lanes find the data at
their periodic reseed.

The notification is sent *after* the data commit, in its own statement: NOTIFY inside a
writing transaction serialises commits on a global lock held through the WAL flush, which
would undo group commit for the whole write path.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping

CHANNEL = "queen_wakeup"
# What became deliverable: one span in a queue, in a known partition or not.
Wake = tuple[int, int | None]
# Announce wake-ups and wait until they are published (core/engine/listener.py `publish`):
# what a state change that is about to be answered calls.
Publish = Callable[[Iterable[Wake]], Awaitable[None]]

# Partition ids carried by one notification per queue (payloads stay far below PostgreSQL's
# 8000 B); past them the notification counts the rest without naming them.
MAX_HINTS = 256


MAX_SERVED = 32  # groups whose local deliveries one notification reports

# Partitions a process's pops just claimed, per (queue, group): `"<queue id>:<group
# token>:<partition id>,...:<ms>"` on this channel, <ms> the milliseconds until the earliest
# of their leases ends (absent: unknown). The other processes hold them back in that group's
# ready set (core/engine/ready) until then or until a release is announced (an ack that
# leaves data behind), so nobody else spends a claim finding them taken; hearsay, which a
# pop checks with a claim before it answers nothing.
CLAIMED_CHANNEL = "queen_claimed"


def encode_claimed(queue_id: int, token: str, partitions: Iterable[int],
                   lease_s: float | None = None) -> str:
    pids = ",".join(str(p) for p in list(partitions)[:MAX_HINTS])
    if lease_s is None:
        return f"{queue_id}:{token}:{pids}"
    return f"{queue_id}:{token}:{pids}:{int(lease_s * 1000)}"


def decode_claimed(payload: str) -> tuple[int, str, list[int], float | None]:
    """(queue id, group token, partition ids, seconds until their lease ends or None);
    raises ValueError for anything else."""
    queue, token, pids, *rest = payload.split(":")
    if len(token) != 8 or len(rest) > 1:
        raise ValueError(f"malformed claimed payload {payload!r}")
    int(token, 16)
    lease_s = int(rest[0]) / 1000 if rest else None
    return int(queue), token, [int(p) for p in pids.split(",") if p], lease_s


def group_token(group: str) -> str:
    """A consumer group's short name in notifications (8 hex digits, ':,=' free)."""
    return f"{zlib.crc32(group.encode()):08x}"


def encode_payload(queue_id: int, count: int, partitions: Iterable[int] = (),
                   served: Mapping[str, int] | None = None) -> str:
    """`served`: spans already handed to this process's pops, per group token."""
    hints = ",".join(str(p) for p in list(partitions)[:MAX_HINTS])
    taken = ",".join(f"{token}={k}" for token, k in list((served or {}).items())[:MAX_SERVED]
                     if k > 0)
    if taken:
        return f"{queue_id}:{count}:{hints}:{taken}"
    if hints:
        return f"{queue_id}:{count}:{hints}"
    return str(queue_id) if count == 1 else f"{queue_id}:{count}"


def decode_payload(payload: str) -> tuple[int, int, list[int], dict[str, int]]:
    """(queue id, count, partition ids, spans served per group token); raises ValueError
    for anything else."""
    queue, _, rest = payload.partition(":")
    count, _, rest = rest.partition(":")
    hints, _, taken = rest.partition(":")
    partitions = [int(p) for p in hints.split(",")] if hints else []
    served: dict[str, int] = {}
    for item in taken.split(",") if taken else []:
        token, eq, k = item.partition("=")
        if not eq or len(token) != 8:
            raise ValueError(f"malformed served group {item!r}")
        int(token, 16)
        served[token] = int(k)
    return int(queue), max(1, int(count)) if count else 1, partitions, served


def hinted_payloads(queues: Mapping[int, tuple[int, list[int], dict[str, int]]]) -> list[str]:
    """The wake-up payloads of one announcement: per queue, how many spans became
    deliverable, in which partitions (when known), and how many of them this process's own
    pops already took, per group."""
    return [encode_payload(q, n, parts, served) for q, (n, parts, served) in
            sorted(queues.items())]
