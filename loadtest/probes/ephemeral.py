"""Ephemeral queues (§19) against durable queues, measured in one run on one broker.

    python -m loadtest probe ephemeral throughput [--seconds 10] [--rounds 3]
    python -m loadtest probe ephemeral rtt [--pairs 300] [--rounds 3]
    python -m loadtest probe ephemeral bounds [--seconds 300]
    python -m loadtest probe ephemeral all           # the three, as docs/deploying/capacity.md reports them

Each starts a durable embedded PostgreSQL (fsync and synchronous_commit on) and a 2-worker
broker on it, unless `--url` names a running broker.

- throughput: the W2 shape (one queue, 100 partitions, 32 producer connections pushing 10
  messages per request, 16 consumers popping up to 100 and acking each batch), closed loop,
  durable and ephemeral rounds alternating; the figure is messages acknowledged per second
  (push + pop + ack), and the ratio ephemeral / durable of the medians. Producers and
  consumers run in processes of their own. An ephemeral push refused with 429 (`queue_full`:
  producers ahead of consumers by maxLength) is retried after 5 ms and not counted.
- rtt: request/reply pairs, one caller and one responder: the caller pushes a request and
  waits (long poll) for the reply; the responder pops the request (long poll), acks it and
  pushes the reply. Durable and ephemeral rounds alternate; p50/p99 of the caller's round
  trip and their ratios.
- bounds: producers outrun a slow consumer on a queue declared with maxBytes 1 MiB (policy
  dropOldest); every second the listing's bytes and depth, the deployment's cellBytes, the
  on-disk size of the ephemeral tables and the broker workers' RSS are sampled; the answer
  is their maxima against the bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import msgspec
import psutil  # type: ignore[import-untyped]

from core.waiting import within
from loadtest import launch
from loadtest.httpc import Connection, HttpError
from loadtest.probes.rounds import Rounds, arguments, in_turn

EPH = "/api/v1/ephemeral"
PARTITIONS = 100
PRODUCERS = 32
CONSUMERS = 16
PUSH_BATCH = 10
POP_BATCH = 100
PAYLOAD = b'{"kind":"event","user":"u-123456","body":"' + b"x" * 160 + b'"}'


# --- throughput (W2 shape) ----------------------------------------------------------------

def _push_body(kind: str, queue: str, part: int) -> bytes:
    if kind == "durable":
        item = b'{"queue":"%s","partition":"p%d","payload":%s}' % (queue.encode(), part, PAYLOAD)
        return b'{"items":[' + b",".join([item] * PUSH_BATCH) + b"]}"
    msg = b'{"payload":%s}' % PAYLOAD
    return (b'{"queue":"%s","partition":"p%d","messages":[' % (queue.encode(), part)
            + b",".join([msg] * PUSH_BATCH) + b"]}")


async def _producer(kind: str, url: str, queue: str, i: int, until: float,
                    counts: dict[str, int]) -> None:
    conn = Connection(url)
    path = EPH + "/push" if kind == "ephemeral" else "/api/v1/push"
    n = i
    try:
        while time.monotonic() < until:
            n += 1
            try:
                answer = await conn.request("POST", path, _push_body(kind, queue,
                                                                     n % PARTITIONS))
            except (TimeoutError, HttpError):
                counts["errors"] += 1
                continue
            if answer.status == 201:
                counts["pushed"] += PUSH_BATCH
            elif answer.status == 429:
                counts["full"] += 1
                await asyncio.sleep(0.005)
            else:
                counts["errors"] += 1
    finally:
        await conn.close()


class _DurableMsg(msgspec.Struct):
    transactionId: str
    partitionId: str
    leaseId: str


class _DurablePop(msgspec.Struct):
    messages: list[_DurableMsg] = []


class _EphMsg(msgspec.Struct):
    id: str


class _EphPop(msgspec.Struct):
    messages: list[_EphMsg] = []


_DURABLE_POP = msgspec.json.Decoder(_DurablePop)
_EPH_POP = msgspec.json.Decoder(_EphPop)


async def _consumer(kind: str, url: str, queue: str, until: float,
                    counts: dict[str, int]) -> None:
    conn = Connection(url)
    if kind == "durable":
        pop = (f"/api/v1/pop/queue/{queue}?batch={POP_BATCH}&partitions=4&wait=true"
               "&timeout=1000&consumerGroup=g1")
    else:
        pop = f"{EPH}/pop?queue={queue}&group=g1&batch={POP_BATCH}&wait=true&timeout=1000"
    try:
        while time.monotonic() < until:
            try:
                answer = await conn.request("GET", pop)
                if answer.status == 204:
                    continue
                if kind == "durable":
                    msgs = _DURABLE_POP.decode(answer.body).messages
                    if not msgs:
                        continue
                    body = msgspec.json.encode({"consumerGroup": "g1", "acknowledgments": [
                        {"transactionId": m.transactionId, "partitionId": m.partitionId,
                         "leaseId": m.leaseId, "status": "completed"} for m in msgs]})
                    acked = await conn.request("POST", "/api/v1/ack/batch", body)
                else:
                    ids = _EPH_POP.decode(answer.body).messages
                    if not ids:
                        continue
                    body = msgspec.json.encode({"queue": queue, "group": "g1",
                                                "acks": [{"id": m.id} for m in ids]})
                    acked = await conn.request("POST", EPH + "/ack", body)
                    msgs = ids  # type: ignore[assignment]
            except (TimeoutError, HttpError, msgspec.DecodeError):
                counts["errors"] += 1
                continue
            if acked.status == 200:
                counts["acked"] += len(msgs)
            else:
                counts["errors"] += 1
    finally:
        await conn.close()


def _side(role: str, kind: str, url: str, queue: str, start_at: float, seconds: float,
          warmup: float, out: Any) -> None:
    """One process: all producers or all consumers; reports counts after the warm-up."""
    async def run() -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(("pushed", "acked", "full", "errors"), 0)
        await asyncio.sleep(max(0.0, start_at - time.time()))
        until = time.monotonic() + seconds + warmup
        if role == "producers":
            tasks = [_producer(kind, url, queue, i, until, counts) for i in range(PRODUCERS)]
        else:
            tasks = [_consumer(kind, url, queue, until, counts) for _ in range(CONSUMERS)]
        runner = asyncio.gather(*tasks)
        await asyncio.sleep(warmup)
        before = dict(counts)
        await runner
        return {k: counts[k] - before[k] for k in counts}
    out.put((role, asyncio.run(run())))


def _round(kind: str, url: str, seconds: float) -> dict[str, float]:
    queue = f"w2-{kind[:3]}-{uuid.uuid4().hex[:8]}"
    ctx = multiprocessing.get_context("spawn")
    out: Any = ctx.Queue()
    start_at = time.time() + 2.0  # both processes start together, after spawning
    warmup = 2.0
    procs = [ctx.Process(target=_side, args=(role, kind, url, queue, start_at, seconds,
                                             warmup, out))
             for role in ("producers", "consumers")]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join(30)
    return {"pushed_per_s": results["producers"]["pushed"] / seconds,
            "acked_per_s": results["consumers"]["acked"] / seconds,
            "full_429": results["producers"]["full"],
            "errors": results["producers"]["errors"] + results["consumers"]["errors"]}


def throughput(url: str, seconds: float, round_index: int, rounds: Rounds) -> None:
    """One round of the W2 shape on each kind of queue, in turn."""
    for kind in in_turn(("durable", "ephemeral"), round_index):
        for name, value in _round(kind, url, seconds).items():
            rounds.add(f"throughput {kind} {name}", value)


# --- request/reply round trip ---------------------------------------------------------------

class _Kind:
    """The verbs of one kind of queue on one connection each."""

    def __init__(self, kind: str, url: str) -> None:
        self.kind = kind
        self.conn = Connection(url)

    async def push(self, queue: str, payload: bytes) -> None:
        if self.kind == "durable":
            body = b'{"items":[{"queue":"%s","payload":%s}]}' % (queue.encode(), payload)
            answer = await self.conn.request("POST", "/api/v1/push", body)
        else:
            body = b'{"queue":"%s","messages":[{"payload":%s}]}' % (queue.encode(), payload)
            answer = await self.conn.request("POST", EPH + "/push", body)
        if answer.status != 201:
            raise RuntimeError(f"push answered {answer.status}")

    async def pop_ack(self, queue: str) -> bytes | None:
        """One message by long poll, acknowledged; its payload (None on timeout)."""
        if self.kind == "durable":
            answer = await self.conn.request(
                "GET", f"/api/v1/pop/queue/{queue}?wait=true&timeout=5000")
            if answer.status == 204:
                return None
            m = msgspec.json.decode(answer.body)["messages"][0]
            ack = msgspec.json.encode({"transactionId": m["transactionId"],
                                       "partitionId": m["partitionId"],
                                       "leaseId": m["leaseId"], "status": "completed"})
            await self.conn.request("POST", "/api/v1/ack", ack)
            return msgspec.json.encode(m["data"])
        answer = await self.conn.request("GET", f"{EPH}/pop?queue={queue}&wait=true"
                                                "&timeout=5000")
        messages = msgspec.json.decode(answer.body)["messages"]
        if not messages:
            return None
        await self.conn.request("POST", EPH + "/ack", msgspec.json.encode(
            {"queue": queue, "acks": [{"id": messages[0]["id"]}]}))
        return msgspec.json.encode(messages[0]["payload"])


async def _pairs(kind: str, url: str, pairs: int) -> list[float]:
    tag = uuid.uuid4().hex[:8]
    requests, replies = f"rq-{kind[:3]}-{tag}", f"rp-{kind[:3]}-{tag}"
    caller, responder = _Kind(kind, url), _Kind(kind, url)
    stop = asyncio.Event()

    async def respond() -> None:
        while not stop.is_set():
            got = await responder.pop_ack(requests)
            if got is not None:
                await responder.push(replies, got)

    serving = asyncio.create_task(respond())
    times: list[float] = []
    try:
        for i in range(pairs + 20):  # the first 20: warm-up, not counted
            start = time.perf_counter()
            await caller.push(requests, b'{"n":%d}' % i)
            while await caller.pop_ack(replies) is None:
                pass
            if i >= 20:
                times.append((time.perf_counter() - start) * 1000)
    finally:
        stop.set()
        await caller.push(requests, b'{"stop":true}')  # let the responder's poll return
        with contextlib.suppress(Exception):
            await within(10, serving)
        await caller.conn.close()
        await responder.conn.close()
    return times


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rtt(url: str, pairs: int, round_index: int, rounds: Rounds) -> None:
    """One round of request/reply pairs on each kind of queue, in turn."""
    for kind in in_turn(("durable", "ephemeral"), round_index):
        got = asyncio.run(_pairs(kind, url, pairs))
        rounds.add(f"rtt {kind} p50 ms", _quantile(got, 0.5))
        rounds.add(f"rtt {kind} p99 ms", _quantile(got, 0.99))


# --- bounds under a producer that outruns its consumer --------------------------------------

MAX_BYTES = 1 << 20


async def _bounds(url: str, database_url: str, seconds: float,
                  broker_pid: int | None) -> dict[str, Any]:
    queue = f"flood-{uuid.uuid4().hex[:8]}"
    admin = Connection(url)
    await admin.request("POST", EPH + "/configure", msgspec.json.encode({
        "queue": queue, "options": {"maxBytes": MAX_BYTES, "policy": "dropOldest"}}))
    until = time.monotonic() + seconds
    counts: dict[str, int] = dict.fromkeys(("pushed", "acked", "full", "errors"), 0)
    big = b'{"payload":"' + b"y" * 1000 + b'"}'
    body = b'{"queue":"%s","messages":[%s]}' % (queue.encode(), b",".join([big] * 10))

    async def flood() -> None:
        conn = Connection(url)
        while time.monotonic() < until:
            answer = await conn.request("POST", EPH + "/push", body)
            counts["pushed" if answer.status == 201 else "errors"] += 1
        await conn.close()

    async def slow() -> None:
        conn = Connection(url)
        while time.monotonic() < until:
            answer = await conn.request("GET", f"{EPH}/pop?queue={queue}&batch=10&autoAck=true")
            counts["acked"] += len(msgspec.json.decode(answer.body)["messages"])
            await asyncio.sleep(0.1)
        await conn.close()

    db = await asyncpg.connect(database_url)
    samples: list[dict[str, float]] = []
    workers = psutil.Process(broker_pid).children(recursive=True) if broker_pid else []

    async def sample() -> None:
        while time.monotonic() < until:
            answer = await admin.request("GET", EPH + "/queues")
            listing = msgspec.json.decode(answer.body)
            mine = next(q for q in listing["queues"] if q["queue"] == queue)
            storage = await db.fetchval(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'queen' AND c.relname LIKE 'eph_%' AND c.relkind = 'r'")
            rss = 0
            for w in workers:
                with contextlib.suppress(psutil.Error):
                    rss = max(rss, w.memory_info().rss)
            samples.append({"bytes": mine["bytes"], "depth": mine["depth"],
                            "cellBytes": listing["cellBytes"], "storage": int(storage),
                            "worker_rss": rss, "drops": mine["drops"]["bounds"]})
            await asyncio.sleep(1.0)

    await asyncio.gather(*(flood() for _ in range(8)), slow(), sample())
    await db.close()
    await admin.close()
    last = samples[-1]
    return {"seconds": seconds, "maxBytes": MAX_BYTES, "maxLength": 10_000,
            "max_bytes_held": max(s["bytes"] for s in samples),
            "max_depth": max(s["depth"] for s in samples),
            "max_cellBytes": max(s["cellBytes"] for s in samples),
            "storage_first_last_max": [samples[0]["storage"], last["storage"],
                                       max(s["storage"] for s in samples)],
            "worker_rss_first_last_max": [samples[0]["worker_rss"], last["worker_rss"],
                                          max(s["worker_rss"] for s in samples)],
            "push_requests_ok": counts["pushed"], "messages_consumed": counts["acked"],
            "dropped_for_bounds": last["drops"]}


# --- the command ------------------------------------------------------------------------------

@contextlib.contextmanager
def _target(args: argparse.Namespace) -> Iterator[tuple[str, str, int | None]]:
    if args.url:
        yield args.url, args.database_url or "", None
        return
    with launch.Postgres() as pg:
        database = launch.run_sync(launch.fresh_database(pg.dsn))
        assert isinstance(database, str)
        with launch.broker(database, args.workers) as server:
            assert server.proc is not None
            yield server.url, database, server.proc.pid


def main(argv: list[str] | None = None) -> int:
    p = arguments("ephemeral", __doc__ or "", connections=None, fast_database=False)
    p.add_argument("what", choices=("throughput", "rtt", "bounds", "all"))
    p.add_argument("--seconds", type=float, help="per throughput round (10) / bounds run (300)")
    p.add_argument("--pairs", type=int, default=300)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--url", help="a running broker instead of a fresh one")
    p.add_argument("--database-url", help="its database (bounds reads table sizes there)")
    args = p.parse_args(argv)
    rounds = Rounds("ephemeral", args)
    with _target(args) as (url, database_url, pid):
        for r in range(args.rounds if args.what != "bounds" else 0):
            if args.what in ("throughput", "all"):
                throughput(url, args.seconds or 10.0, r, rounds)
            if args.what in ("rtt", "all"):
                rtt(url, args.pairs, r, rounds)
            rounds.end_round()
        if args.what in ("bounds", "all"):
            seconds = args.seconds if args.seconds and args.what == "bounds" else 300.0
            print(f"bounds under a flood ({seconds:.0f} s)", file=sys.stderr)
            rounds.detail("bounds under a flood",
                          asyncio.run(_bounds(url, database_url, seconds, pid)))
    rounds.ratio("throughput acked/s ephemeral / durable", "throughput ephemeral acked_per_s",
                 "throughput durable acked_per_s")
    for q in ("p50", "p99"):
        rounds.ratio(f"rtt {q} durable / ephemeral", f"rtt durable {q} ms",
                     f"rtt ephemeral {q} ms")
    return rounds.finish()


if __name__ == "__main__":
    raise SystemExit(main())
