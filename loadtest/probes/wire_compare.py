"""JSON against the binary formats (wire-protocol §7), measured in one run:
`python -m loadtest probe wire_compare`.

One durable embedded PostgreSQL and one broker (or `--url`); the wire modes alternate round
by round, so drift on a shared machine hits them alike, and each round gives a ratio:

- push: per round and mode (json, binary = plain binary pushes, frames = framed pushes),
  `--connections` producers push `--batch`-message bodies over `--partitions` partitions for
  `--seconds` (the W1 shape, `loadtest.runner`), then every acknowledged push is read back
  (the gate); the figure is the steady push msg/s;
- pop: one queue prefilled with `--messages` messages (framed pushes of `--batch`, so its
  segments are client-built blobs as a frames deployment stores them; `--prefill json` for
  broker-built ones). Per round and mode (json, frames = framed pops), a consumer group of
  its own drains it: `--consumers` connections in two processes popping `--pop-batch`
  (`partitions=4`, no wait) and acking every message of each batch (`/ack/batch`) until the
  queue is empty for them; every message must arrive exactly once; msg/s = messages / time.

Beside msg/s, each round records the broker's CPU time per message (its whole process
tree, psutil): on a machine shared with other work, wall-clock rates swing from round to
round, while the CPU the broker spends on a message says what each format costs it.

Load goes only to 127.0.0.1; every loop is bounded by count and time; only processes this
command started are stopped, by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import NamedTuple

import msgspec
import psutil  # type: ignore[import-untyped]

from loadtest import launch
from loadtest.cell import steady
from loadtest.consumer import popped_messages
from loadtest.corpus import build_corpus, payload
from loadtest.drain import fetch_all
from loadtest.gate import check
from loadtest.httpc import Connection
from loadtest.probes.rounds import Rounds, arguments, in_turn
from loadtest.runner import Shape, run_cell
from loadtest.wire import BINARY_TYPE, WIRES, push_body

POP_WIRES = ("json", "frames")


class Figure(NamedTuple):
    msg_per_s: float
    cpu_us_per_msg: float  # broker CPU per message


def _tree_cpu(pid: int | None) -> float:
    """CPU seconds of a process and its children so far (0 without a pid)."""
    if pid is None:
        return 0.0
    total = 0.0
    try:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                total += t.user + t.system
    except psutil.Error:
        pass
    return total


def _push_round(url: str, pid: int | None, wire: str, args: argparse.Namespace,
                tag: str) -> Figure:
    queue = f"wc-push-{wire}-{tag}"
    shape = Shape(queue=queue, duration=args.seconds, connections=args.connections,
                  batch=args.batch, partitions=args.partitions, wire=wire, producer_procs=2,
                  consumer_procs=0)
    cpu = _tree_cpu(pid)
    out = run_cell(url, shape, {}, f"push {wire}")
    cpu = _tree_cpu(pid) - cpu
    gate = check("fetch", out.pushed, asyncio.run(fetch_all(url, queue, args.partitions)),
                 out.uncertain)
    if not gate.passed:
        raise SystemExit(f"push {wire}: the gate failed: {gate}")
    return Figure(steady(out.series, "push_rate"), cpu / max(1, out.pushed.count()) * 1e6)


async def _prefill(url: str, queue: str, messages: int, batch: int, wire: str) -> None:
    corpus = build_corpus()
    conns = [Connection(url) for _ in range(8)]

    async def one(k: int) -> None:
        for start in range(k * batch, messages, batch * len(conns)):
            n = min(batch, messages - start)
            txids = [b"p0-%d" % (start + i) for i in range(n)]
            payloads = [payload(corpus, 0, start + i, time.time()) for i in range(n)]
            partition = b"p%d" % (start // batch % 16)
            if wire == "json":
                body = msgspec.json.encode({"items": [
                    {"queue": queue, "partition": partition.decode(), "transactionId": t.decode(),
                     "payload": msgspec.Raw(p)} for t, p in zip(txids, payloads)]})
                answer = await conns[k].request("POST", "/api/v1/push", body)
            else:
                body = push_body("frames", queue.encode(), partition, txids, payloads)
                answer = await conns[k].request("POST", "/api/v1/push", body,
                                                content_type=BINARY_TYPE)
            if answer.status != 201:
                raise SystemExit(f"prefill: {answer.status} {answer.body[:200]!r}")

    try:
        await asyncio.gather(*(one(k) for k in range(len(conns))))
    finally:
        for c in conns:
            await c.close()


def _drain_process(url: str, queue: str, group: str, frames: bool, connections: int,
                   pop_batch: int, deadline_s: float) -> tuple[list[str], float, float, int]:
    import uvloop

    return uvloop.run(_drain(url, queue, group, frames, connections, pop_batch, deadline_s))


async def _drain(url: str, queue: str, group: str, frames: bool, connections: int,
                 pop_batch: int, deadline_s: float) -> tuple[list[str], float, float, int]:
    """Pop and ack until the group sees the queue empty; answers the transactionIds seen,
    the first request's and the last delivery's time, and the number of errors."""
    seen: list[str] = []
    errors = 0
    started = time.time()
    last = started
    deadline = time.monotonic() + deadline_s
    path = (f"/api/v1/pop/queue/{queue}?batch={pop_batch}&partitions=4&wait=false"
            f"&consumerGroup={group}" + ("&frames=true" if frames else ""))

    async def worker() -> None:
        nonlocal errors, last
        conn = Connection(url)
        empty = 0
        try:
            while empty < 3 and time.monotonic() < deadline:
                answer = await conn.request("GET", path)
                if answer.status == 204:
                    empty += 1
                    await asyncio.sleep(0.05)
                    continue
                if answer.status != 200:
                    errors += 1
                    await asyncio.sleep(0.1)
                    continue
                empty = 0
                messages = popped_messages(answer.body, frames)
                body = msgspec.json.encode({"consumerGroup": group, "acknowledgments": [
                    {"transactionId": m.transactionId, "partitionId": m.partitionId,
                     "leaseId": m.leaseId, "status": "completed"} for m in messages]})
                acked = await conn.request("POST", "/api/v1/ack/batch", body)
                if acked.status != 200:
                    errors += 1
                    continue
                seen.extend(m.transactionId for m in messages)
                last = time.time()
        finally:
            await conn.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return seen, started, last, errors


def _pop_round(pool: ProcessPoolExecutor, url: str, pid: int | None, queue: str, wire: str,
               args: argparse.Namespace, tag: str) -> Figure:
    group = f"{wire}-{tag}"
    per = [args.consumers // 2 + args.consumers % 2, args.consumers // 2]
    cpu = _tree_cpu(pid)
    futures = [pool.submit(_drain_process, url, queue, group, wire == "frames", n,
                           args.pop_batch, 300.0) for n in per if n]
    results = [f.result() for f in futures]
    cpu = _tree_cpu(pid) - cpu
    seen = [t for r in results for t in r[0]]
    errors = sum(r[3] for r in results)
    if len(seen) != args.messages or len(set(seen)) != args.messages or errors:
        raise SystemExit(f"pop {wire}: {len(seen)} deliveries, {len(set(seen))} distinct of "
                         f"{args.messages}, {errors} errors")
    started = min(r[1] for r in results)
    finished = max(r[2] for r in results)
    return Figure(args.messages / (finished - started), cpu / args.messages * 1e6)


@contextlib.contextmanager
def _broker(args: argparse.Namespace) -> Iterator[tuple[str, int | None]]:
    """The broker's URL and the pid of its process tree (None for --url)."""
    if args.url:
        yield args.url, None
        return
    with launch.Postgres() as pg:
        url = asyncio.run(launch.fresh_database(pg.dsn))
        with launch.broker(url, args.workers) as server:
            yield server.url, server.proc.pid if server.proc else None


def main(argv: list[str] | None = None) -> int:
    p = arguments("wire_compare", (__doc__ or "").split("\n\n")[0], seconds=8.0,
                  fast_database=False)
    p.add_argument("--url", help="an already running broker (127.0.0.1 only)")
    p.add_argument("--batch", type=int, default=100, help="messages per push")
    p.add_argument("--partitions", type=int, default=100, help="push: partitions")
    p.add_argument("--messages", type=int, default=50_000, help="pop: prefilled messages")
    p.add_argument("--prefill", choices=("frames", "json"), default="frames")
    p.add_argument("--consumers", type=int, default=8, help="pop: consumer connections")
    p.add_argument("--pop-batch", type=int, default=100)
    p.add_argument("--skip", choices=("push", "pop"), help="measure only the other one")
    args = p.parse_args(argv)
    if args.url and not args.url.startswith(("http://127.0.0.1", "http://localhost")):
        print("wire_compare: --url must be a broker on this machine", file=sys.stderr)
        return 2
    tag = uuid.uuid4().hex[:6]
    rounds = Rounds("wire_compare", args)
    push = f"push (batch {args.batch}, {args.partitions} partitions)"
    pop = f"pop+ack (batch {args.pop_batch}, {args.prefill} segments of {args.batch})"
    with _broker(args) as (url, pid), ProcessPoolExecutor(2) as pool:
        queue = f"wc-pop-{tag}"
        if args.skip != "pop":  # every pop round reads it again, as a group of its own
            asyncio.run(_prefill(url, queue, args.messages, args.batch, args.prefill))
        for r in range(args.rounds):
            if args.skip != "push":
                for wire in in_turn(WIRES, r):
                    f = _push_round(url, pid, wire, args, f"{tag}-{r}")
                    rounds.add(f"{push} {wire} msg/s", f.msg_per_s)
                    rounds.add(f"{push} {wire} broker CPU us/msg", f.cpu_us_per_msg)
            if args.skip != "pop":
                for wire in in_turn(POP_WIRES, r):
                    f = _pop_round(pool, url, pid, queue, wire, args, str(r))
                    rounds.add(f"{pop} {wire} msg/s", f.msg_per_s)
                    rounds.add(f"{pop} {wire} broker CPU us/msg", f.cpu_us_per_msg)
            rounds.end_round()
    for name, wires in ((push, WIRES), (pop, POP_WIRES)):
        for wire in wires:
            if wire != "json":
                for what in ("msg/s", "broker CPU us/msg"):
                    rounds.ratio(f"{name} {what} {wire} / json", f"{name} {wire} {what}",
                                 f"{name} json {what}")
    return rounds.finish()


if __name__ == "__main__":
    sys.exit(main())
