"""Read a queue back by offset (`POST /api/v1/fetch`) for the gate of push-only cells.

Fetch is read-only (no lease, no cursor), so a push-only workload can be checked without the
pop path and without disturbing anything.
"""

from __future__ import annotations

import msgspec

from loadtest.gate import Bitmaps
from loadtest.httpc import Connection


class _Record(msgspec.Struct):
    offset: int
    transactionId: str


class _Entry(msgspec.Struct):
    highWatermark: int = 0
    records: list[_Record] = []
    error: str | None = None


class _Fetch(msgspec.Struct):
    entries: list[_Entry]


_FETCH = msgspec.json.Decoder(_Fetch)


async def fetch_all(url: str, queue: str, partitions: int, max_rounds: int = 100_000) -> Bitmaps:
    """Every stored (producer, sequence) of partitions p0..p{n-1}, with delivery counts."""
    seen = Bitmaps()
    conn = Connection(url)
    next_offset = {p: 0 for p in range(partitions)}
    try:
        for _ in range(max_rounds):
            todo = [p for p, off in next_offset.items() if off >= 0][:500]
            if not todo:
                break
            body = msgspec.json.encode({"entries": [
                {"queue": queue, "partition": f"p{p}", "offset": next_offset[p],
                 "maxBytes": 4 * 1024 * 1024} for p in todo]})
            answer = await conn.request("POST", "/api/v1/fetch", body, timeout=60)
            if answer.status != 200:
                raise RuntimeError(f"fetch answered {answer.status}: {answer.body[:200]!r}")
            for p, entry in zip(todo, _FETCH.decode(answer.body).entries):
                for rec in entry.records:
                    producer, seq = rec.transactionId[1:].split("-")
                    seen.mark(int(producer), int(seq))
                last = entry.records[-1].offset + 1 if entry.records else next_offset[p]
                next_offset[p] = -1 if last >= entry.highWatermark else last
    finally:
        await conn.close()
    return seen
