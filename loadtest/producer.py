"""Producer worker process: `connections` keep-alive connections pushing batches.

Every connection is its own producer id with its own sequence, so the gate can tell exactly
which (producer, sequence) pairs were acknowledged. A 429 is retried with the same body
(the same transactionIds, so deduplication makes the retry safe); a request that fails or
times out is counted as uncertain: it may or may not have been stored.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

import msgspec

from loadtest.board import Board
from loadtest.corpus import build_corpus, payload
from loadtest.gate import Bitmaps
from loadtest.httpc import Connection, HttpError
from loadtest.stats import Histogram, RecentP99
from loadtest.wire import BINARY_TYPE, push_body


@dataclass(frozen=True, slots=True)
class ProducerSpec:
    url: str
    queue: str
    first_producer: int      # producer id of this process's first connection
    connections: int
    batch: int
    partitions: int
    total_connections: int   # across all producer processes, to split the offered rate
    duration: float
    seed: int
    message_bytes: int
    slot: int
    max_messages: int = 0    # 0 = bounded by time only
    wire: str = "json"       # json | binary | frames (loadtest.wire)


class _Verdict(msgspec.Struct):
    status: str


_VERDICTS = msgspec.json.Decoder(list[_Verdict])


def run(spec: ProducerSpec, board: Board, results: Any) -> None:
    import uvloop

    out = uvloop.run(_main(spec, board))
    results.put(("producer", spec.slot, out))


async def _main(spec: ProducerSpec, board: Board) -> dict[str, Any]:
    corpus = build_corpus(seed=spec.seed, message_bytes=spec.message_bytes)
    acked = Bitmaps()
    hist = Histogram()
    window = RecentP99()
    deadline = time.monotonic() + spec.duration
    tasks = [asyncio.create_task(_connection(spec, board, corpus, spec.first_producer + i,
                                             acked, hist, window, deadline))
             for i in range(spec.connections)]
    reporter = asyncio.create_task(_report(board, spec.slot, window, deadline))
    await asyncio.gather(*tasks)
    reporter.cancel()
    return {"acked": {p: bytes(b) for p, b in acked.maps.items()}, "push_hist": hist.counts,
            "uncertain": int(board.mine(spec.slot, "uncertain"))}


async def _report(board: Board, slot: int, window: RecentP99, deadline: float) -> None:
    while time.monotonic() < deadline + 5:
        await asyncio.sleep(1.0)
        board.put(slot, "push_p99", window.take_p99())


async def _connection(spec: ProducerSpec, board: Board, corpus: Any, producer: int,
                      acked: Bitmaps, hist: Histogram, window: RecentP99, deadline: float) -> None:
    rng = random.Random(spec.seed * 1_000_003 + producer)
    conn = Connection(spec.url)
    queue = spec.queue.encode()
    seq = 0
    next_at = time.monotonic()
    limit = spec.max_messages // spec.total_connections if spec.max_messages else 0
    try:
        while time.monotonic() < deadline and not board.get("stop"):
            if limit and seq >= limit:
                break
            rate = board.get("rate")
            if rate > 0:  # open loop at the offered rate, never bursting more than 1 s behind
                interval = spec.batch * spec.total_connections / rate
                now = time.monotonic()
                next_at = max(next_at + interval, now - 1.0)
                if next_at > now:
                    await asyncio.sleep(next_at - now)
            part = rng.randrange(spec.partitions)
            sent_at = time.time()
            if spec.wire == "json":
                items = [b'{"queue":"%s","partition":"p%d","transactionId":"p%d-%d","payload":%s}'
                         % (queue, part, producer, seq + k,
                            payload(corpus, producer, seq + k, sent_at))
                         for k in range(spec.batch)]
                body = b'{"items":[' + b",".join(items) + b"]}"
            else:
                body = push_body(spec.wire, queue, b"p%d" % part,
                                 [b"p%d-%d" % (producer, seq + k) for k in range(spec.batch)],
                                 [payload(corpus, producer, seq + k, sent_at)
                                  for k in range(spec.batch)])
            ok = await _send(conn, board, spec.slot, body, hist, window,
                             "application/json" if spec.wire == "json" else BINARY_TYPE)
            if ok is None:
                board.add(spec.slot, "uncertain", spec.batch)
            else:
                for k, status in enumerate(ok):
                    if status in ("queued", "duplicate"):
                        acked.mark(producer, seq + k)
                board.add(spec.slot, "pushed", len(ok))
                board.add(spec.slot, "push_reqs")
            seq += spec.batch
    finally:
        await conn.close()


async def _send(conn: Connection, board: Board, slot: int, body: bytes, hist: Histogram,
                window: RecentP99, content_type: str) -> list[str] | None:
    """Push one body; answer the per-item statuses, or None if the outcome is unknown."""
    for attempt in range(20):
        start = time.perf_counter()
        try:
            answer = await conn.request("POST", "/api/v1/push", body, timeout=30,
                                        content_type=content_type)
        except (TimeoutError, HttpError):
            board.add(slot, "push_errors")
            return None
        ms = (time.perf_counter() - start) * 1000
        if answer.status == 201:
            hist.add(ms)
            window.add(ms)
            return [v.status for v in _VERDICTS.decode(answer.body)]
        board.add(slot, "push_errors")
        if answer.status in (429, 503):
            await asyncio.sleep(float(answer.headers.get(b"retry-after", b"1")) * 0.2)
            continue
        if answer.status >= 500 and attempt < 3:
            await asyncio.sleep(0.5)
            continue
        return None
    return None
