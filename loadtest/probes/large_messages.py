"""Pops of large messages: `python -m loadtest probe large_messages [--root ../before]`.

What a pop of large messages costs the broker, and how much memory its worker takes for it:
the cost of a pop that reads the segment of one message (a flush's messages packed into
segments of about 1 MiB, core/segments.py `SEGMENT_TARGET_BYTES`) and the memory of a pop
whose answer keeps within its byte budget (`QUEEN_POP_MAX_BYTES`).

Per round and per checkout (this one, and `--root`'s in the same rounds, reversed every
other round), on a fresh database of one durable embedded PostgreSQL, the broker's web tier
of that checkout with one web worker, on 127.0.0.1:

* push: `--small` messages of `--small-bytes` in one push (random bytes in base64, a JSON
  string payload of that length, which zstd keeps at three quarters of it), then `--large`
  of `--large-bytes` in as many pushes sent at once, so the write coalescer may put them in
  one flush; one queue, one partition. Reported: the broker's CPU for all of it, the segments written and the
  largest one's stored bytes.
* single pops, on a broker started again (so the pushes' memory is not counted): `--passes`
  consumer groups, each reading every message by pops of one (`batch=1`, `autoAck`, no
  wait). Reported: the broker's CPU per pop of a small and of a large message (psutil over
  its process tree, read outside the pops, divided by the pops), the wall time of each, and
  the web worker's peak RSS and its growth over the phase.
* batch pops, on a broker started again: one more group drains the queue by pops of
  `--batch` (`autoAck`, no wait). Reported: the first answer's bytes and messages, the pops
  it took, the broker's CPU for them, and the worker's peak RSS growth over the phase.

The worker's RSS is sampled every 10 ms by a thread of this process while a phase runs; each
phase starts with a pop of a small message of another queue (the pop path warmed, its
statements prepared) before the RSS it grows from is read. With `--root`, every figure is
also given as this ÷ other, round by round. The other checkout needs nothing of this probe:
only its broker runs (`loadtest.launch.broker(root=...)`, its own migrations applied to the
fresh database); the client, the sampling and the figures are this checkout's.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import asyncpg
import httpx
import psutil  # type: ignore[import-untyped]

from loadtest import launch
from loadtest.probes.rounds import Rounds, arguments, cpu_seconds, in_turn

QUEUE = "large"
WARM_QUEUE = "large-warm"  # one small message, popped before each phase's readings
MB = 1e6
_TIMEOUT = httpx.Timeout(120.0)  # a request of tens of MB on a loaded machine
# Figures compared this ÷ other, in the order the report gives them.
FIGURES = ("push CPU ms", "segments", "largest segment MB",
           "small pop CPU ms", "large pop CPU ms", "small pop wall ms", "large pop wall ms",
           "single pops peak RSS MB", "single pops RSS growth MB",
           "batch first answer MB", "batch first answer messages", "batch pops",
           "batch CPU ms", "batch RSS growth MB")


def incompressible(length: int) -> str:
    """A payload string of `length` characters of random bytes in base64: as little as a JSON
    string can be compressed (zstd keeps three quarters of it)."""
    return base64.b64encode(os.urandom(length * 3 // 4 + 3)).decode()[:length]


def _push_body(queue: str, payloads: Sequence[str]) -> bytes:
    return json.dumps({"items": [{"queue": queue, "partition": "p0", "payload": p}
                                 for p in payloads]}).encode()


class WorkerRss:
    """The largest RSS of the broker's web workers (the processes below `pid`, or `pid` if
    it has none), sampled every `every` seconds by a thread while open: `start` is the
    reading when it opened, `peak` the largest reading since."""

    def __init__(self, pid: int, every: float = 0.01) -> None:
        root = psutil.Process(pid)
        self._procs = root.children(recursive=True) or [root]
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self.start = self.peak = self.now()

    def now(self) -> int:
        rss = 0
        for proc in self._procs:
            try:
                rss = max(rss, proc.memory_info().rss)
            except psutil.Error:
                continue
        return rss

    def _sample(self) -> None:
        while not self._stop.wait(self._every):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())


async def _pop(http: httpx.AsyncClient, queue: str, group: str, batch: int
               ) -> tuple[int, list[dict[str, Any]]]:
    """One pop without waiting, acknowledged at delivery: (answer bytes, messages)."""
    r = await http.get(f"/api/v1/pop/queue/{queue}", params={
        "batch": str(batch), "wait": "false", "autoAck": "true", "consumerGroup": group})
    if r.status_code == 204:
        return 0, []
    assert r.status_code == 200, (r.status_code, r.text[:300])
    messages: list[dict[str, Any]] = r.json()["messages"]
    return len(r.content), messages


async def _warm(http: httpx.AsyncClient, group: str) -> None:
    _, messages = await _pop(http, WARM_QUEUE, group, 1)
    assert len(messages) == 1, "the warm-up message was not delivered"


async def push_phase(url: str, pid: int, args: argparse.Namespace, *, queue: str = QUEUE
                     ) -> dict[str, float]:
    """The small messages in one push, then the large ones in concurrent pushes of one."""
    small = [incompressible(args.small_bytes) for _ in range(args.small)]
    large = [_push_body(queue, [incompressible(args.large_bytes)]) for _ in range(args.large)]
    limits = httpx.Limits(max_connections=max(args.large, 1) + 1)
    async with httpx.AsyncClient(base_url=url, timeout=_TIMEOUT, limits=limits) as http:
        r = await http.post("/api/v1/push", content=_push_body(WARM_QUEUE, ["warm"]),
                            headers={"content-type": "application/json"})
        assert r.status_code == 201, r.text[:300]
        before = cpu_seconds(pid)
        if small:
            r = await http.post("/api/v1/push", content=_push_body(queue, small),
                                headers={"content-type": "application/json"})
            assert r.status_code == 201, r.text[:300]
        answers = await asyncio.gather(*(
            http.post("/api/v1/push", content=body,
                      headers={"content-type": "application/json"}) for body in large))
        used = cpu_seconds(pid) - before
    for answer in answers:
        assert answer.status_code == 201, answer.text[:300]
    return {"push CPU ms": used * 1e3}


async def segments(database_url: str, *, queue: str = QUEUE) -> dict[str, float]:
    """The segments the queue's messages were written in, and the largest one's bytes."""
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT count(*), coalesce(max(octet_length(s.blob)), 0)"
            "  FROM queen.log_segments s"
            "  JOIN queen.log_partitions p ON p.id = s.partition_id"
            "  JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1", queue)
    finally:
        await conn.close()
    assert row is not None  # an aggregate answers one row
    return {"segments": float(row[0]), "largest segment MB": row[1] / MB}


async def single_pops(url: str, pid: int, args: argparse.Namespace, *, queue: str = QUEUE
                      ) -> dict[str, float]:
    """`--passes` groups, each reading every message by pops of one."""
    cpu = {"small": 0.0, "large": 0.0}
    wall = {"small": 0.0, "large": 0.0}
    async with httpx.AsyncClient(base_url=url, timeout=_TIMEOUT) as http:
        await _warm(http, "warm-single")
        with WorkerRss(pid) as rss:
            for n in range(args.passes):
                for kind, count, size in (("small", args.small, args.small_bytes),
                                          ("large", args.large, args.large_bytes)):
                    before, started = cpu_seconds(pid), time.perf_counter()
                    for _ in range(count):
                        _, messages = await _pop(http, queue, f"single-{n}", 1)
                        sizes = [len(m["data"]) for m in messages]
                        assert sizes == [size], (kind, sizes)  # one message, of that kind
                    wall[kind] += time.perf_counter() - started
                    cpu[kind] += cpu_seconds(pid) - before
    out = {"single pops peak RSS MB": rss.peak / MB,
           "single pops RSS growth MB": (rss.peak - rss.start) / MB}
    for kind, count in (("small", args.small), ("large", args.large)):
        if count:
            out[f"{kind} pop CPU ms"] = cpu[kind] / (count * args.passes) * 1e3
            out[f"{kind} pop wall ms"] = wall[kind] / (count * args.passes) * 1e3
    return out


async def batch_pops(url: str, pid: int, args: argparse.Namespace, *, queue: str = QUEUE
                     ) -> dict[str, float]:
    """One group drains the queue by pops of `--batch`."""
    answers: list[tuple[int, int]] = []
    async with httpx.AsyncClient(base_url=url, timeout=_TIMEOUT) as http:
        await _warm(http, "warm-batch")
        with WorkerRss(pid) as rss:
            before = cpu_seconds(pid)
            while len(answers) <= args.small + args.large:  # each pop answers at least one
                size, messages = await _pop(http, queue, "batch", args.batch)
                if not messages:
                    break
                answers.append((size, len(messages)))
            used = cpu_seconds(pid) - before
    assert sum(n for _, n in answers) == args.small + args.large, answers
    return {"batch first answer MB": answers[0][0] / MB,
            "batch first answer messages": float(answers[0][1]),
            "batch pops": float(len(answers)), "batch CPU ms": used * 1e3,
            "batch RSS growth MB": (rss.peak - rss.start) / MB}


def measure(root: Path, server_url: str, args: argparse.Namespace) -> dict[str, float]:
    """Every figure of one checkout: its broker, started afresh for each phase, on a fresh
    database of the server at `server_url`."""
    url = asyncio.run(launch.fresh_database(server_url, migrate=False))
    figures: dict[str, float] = {}
    with launch.broker(url, 1, root=root) as srv:
        assert srv.proc is not None
        figures.update(asyncio.run(push_phase(srv.url, srv.proc.pid, args)))
    figures.update(asyncio.run(segments(url)))
    for phase in (single_pops, batch_pops):
        with launch.broker(url, 1, root=root) as srv:
            assert srv.proc is not None
            figures.update(asyncio.run(phase(srv.url, srv.proc.pid, args)))
    return figures


def main(argv: list[str] | None = None) -> int:
    p = arguments("large_messages", __doc__ or "", rounds=3, connections=None,
                  fast_database=False)
    p.add_argument("--root", type=Path, help="another checkout, measured in the same run")
    p.add_argument("--small", type=int, default=16, help="small messages, in one push")
    p.add_argument("--small-bytes", type=int, default=1_000_000,
                   help="a small message's payload (16 of 1 MB keep within the 16 MiB body)")
    p.add_argument("--large", type=int, default=8, help="large messages, one push each, sent "
                   "at once (8 of 8 MiB and the small ones exceed the 64 MiB pop budget)")
    p.add_argument("--large-bytes", type=int, default=8 << 20)
    p.add_argument("--passes", type=int, default=3,
                   help="consumer groups reading every message by pops of one")
    p.add_argument("--batch", type=int, default=1000, help="the batch pops' batch")
    args = p.parse_args(argv)
    if args.small + args.large < 1 or args.passes < 1:
        p.error("at least one message and one pass")
    sides = [("this", launch.ROOT)] + ([("other", args.root.resolve())] if args.root else [])
    rounds = Rounds("large_messages", args)
    rounds.detail("payload bytes", {"small": args.small_bytes, "large": args.large_bytes})
    with launch.Postgres() as pg:
        for r in range(args.rounds):
            for side, root in in_turn(sides, r):
                for figure, value in measure(root, pg.dsn, args).items():
                    rounds.add(f"{side} {figure}", value)
            rounds.end_round()
    if args.root is not None:
        for figure in FIGURES:
            rounds.ratio(f"{figure}: this / other", f"this {figure}", f"other {figure}")
        rounds.detail("other", str(args.root.resolve()))
    return rounds.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
