"""Make a cell's partitions and its groups' cursors before the cell is measured.

A cell on a fresh queue would count, in its window, the one-off creation of every partition
(on Citus a statement that writes reference tables, with a two-phase commit) and of every
group's cursors. What a cell compares is the cost per message in steady state, so the cells
that ask for it push one message to each of their partitions first and let each group consume
those (autoAck), leaving the queue as empty as it was and every cursor made.
"""

from __future__ import annotations

from urllib.parse import quote

import msgspec

from loadtest.httpc import Connection
from loadtest.runner import Shape


class _WarmPop(msgspec.Struct):
    messages: list[msgspec.Raw] = []


_WARM_POP = msgspec.json.Decoder(_WarmPop)
_MOST_POPS = 10_000  # a bound: each pop takes at least one message until the queue is empty


async def warm(url: str, shape: Shape) -> int:
    """Push one message to each of `shape`'s partitions and consume them with each of its
    groups; answer how many messages the groups consumed (partitions × groups)."""
    conn = Connection(url)
    try:
        items = [{"queue": shape.queue, "partition": f"p{p}", "transactionId": f"warm-{p}",
                  "payload": {"warm": p}} for p in range(shape.partitions)]
        answer = await conn.request("POST", "/api/v1/push",
                                    msgspec.json.encode({"items": items}), timeout=60)
        if answer.status != 201:
            raise RuntimeError(f"warm-up push answered {answer.status}: {answer.body[:200]!r}")
        consumed = 0
        for group in shape.groups:
            path = (f"/api/v1/pop/queue/{quote(shape.queue, safe='')}?batch=500"
                    f"&partitions=100&wait=false&autoAck=true"
                    f"&consumerGroup={quote(group, safe='')}")
            for _ in range(_MOST_POPS):
                answer = await conn.request("GET", path, timeout=60)
                if answer.status == 204:
                    break
                if answer.status != 200:
                    raise RuntimeError(
                        f"warm-up pop answered {answer.status}: {answer.body[:200]!r}")
                got = len(_WARM_POP.decode(answer.body).messages)
                if not got:
                    break
                consumed += got
        return consumed
    finally:
        await conn.close()
