"""Streams and maxSize, measured: `python -m loadtest probe streams_cost`.

One broker (web workers) on a fresh database; each round runs every variant, alternating:

- `runner`: the official client's stream runner (`Stream.from_(q).map(f).to(sink).run`,
  its defaults: pops of batch 200 over 4 partitions, one cycle per partition) moves
  `--messages` preloaded messages of a 4-partition queue through a map into a sink queue;
  throughput is messages/s until the sink holds them all.
- `raw`: the same work by hand: one loop popping the same way, pushing each partition's
  mapped messages to the sink (`/push`) and acking them (`/ack/batch`): three requests per
  partition instead of one cycle, and no atomicity.
- `maxSize`: push throughput and broker CPU per pushed message into a queue with
  `maxSize` 0 (no check) and with a `maxSize` no push reaches (the check runs on every
  flush), `--connections` connections pushing batches of 10 for `--seconds`; and, where the
  check runs, in PostgreSQL: the time of one `queen.append` of 10 messages (asyncpg, one
  connection, no HTTP) into such queues of 10 partitions read by 2 groups, 300 flushes per
  variant per round in alternating blocks of 50.

Ratios are of medians over the rounds (runner / raw; maxSize on / off). Load goes only to
127.0.0.1; only processes this command started are signalled.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import asyncpg
import httpx
from queen import Queen
from queen.streams import Stream

from core.engine.directory import PartitionName
from core.engine.writes import NewMessage, append
from core.ids import uuid7
from loadtest import launch
from loadtest.corpus import build_corpus
from loadtest.probes.encryption_cost import _pusher
from loadtest.probes.rounds import FAST_DATABASE, Rounds, arguments, cpu_seconds, in_turn

PARTITIONS = 4
T = TypeVar("T")


def _sync(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def _preload(http: httpx.AsyncClient, queue: str, n: int) -> None:
    for start in range(0, n, 500):
        r = await http.post("/api/v1/push", json={"items": [
            {"queue": queue, "partition": f"p{i % PARTITIONS}", "payload": {"n": i}}
            for i in range(start, min(start + 500, n))]})
        r.raise_for_status()


async def _sink_size(http: httpx.AsyncClient, sink: str) -> int:
    r = await http.get(f"/api/v1/resources/queues/{sink}/depth")
    return int(r.json()["pending"]) if r.status_code == 200 else 0


async def _runner(url: str, n: int) -> float:
    source = f"s-{uuid.uuid4().hex[:8]}"
    sink = source + "-sink"
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        await _preload(http, source, n)
        client = Queen(url)
        try:
            start = time.monotonic()
            runner = await (Stream.from_(client.queue(source))
                            .map(lambda m: {"n": m["data"]["n"] * 2})
                            .to(client.queue(sink))
                            .run(query_id=source, url=url, max_wait_millis=200))
            try:
                while await _sink_size(http, sink) < n:
                    await asyncio.sleep(0.05)
                elapsed = time.monotonic() - start
            finally:
                await runner.stop()
        finally:
            await client.close()
    return n / elapsed


async def _raw(url: str, n: int) -> float:
    source = f"r-{uuid.uuid4().hex[:8]}"
    sink, group = source + "-sink", f"raw.{source}"
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        await _preload(http, source, n)
        start, done = time.monotonic(), 0
        while done < n:
            r = await http.get(f"/api/v1/pop/queue/{source}", params={
                "batch": "200", "wait": "true", "timeout": "1000", "consumerGroup": group,
                "partitions": str(PARTITIONS)})
            if r.status_code == 204:
                continue
            by_partition: dict[str, list[dict[str, Any]]] = {}
            for m in r.json()["messages"]:
                by_partition.setdefault(m["partitionId"], []).append(m)
            for messages in by_partition.values():
                pushed = await http.post("/api/v1/push", json={"items": [
                    {"queue": sink, "partition": m["partition"],
                     "payload": {"n": m["data"]["n"] * 2}} for m in messages]})
                pushed.raise_for_status()
                acked = await http.post("/api/v1/ack/batch", json={
                    "consumerGroup": group, "acknowledgments": [
                        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                         "leaseId": m["leaseId"], "status": "completed"} for m in messages]})
                acked.raise_for_status()
                done += len(messages)
        return n / (time.monotonic() - start)


async def _max_size(url: str, limit: int, connections: int, seconds: float,
                    bodies: tuple[bytes, ...], pid: int) -> tuple[float, float]:
    queue = f"m-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        r = await http.post("/api/v1/configure", json={"queue": queue,
                                                       "options": {"maxSize": limit}})
        r.raise_for_status()
    cpu = cpu_seconds(pid)
    start = time.monotonic()
    pushed = sum(await asyncio.gather(*(
        _pusher(url, queue, k, 10, bodies, start + seconds) for k in range(connections))))
    elapsed = time.monotonic() - start
    return pushed / elapsed, (cpu_seconds(pid) - cpu) / max(pushed, 1) * 1e6


async def _append_cost(url: str, database_url: str) -> tuple[float, float]:
    """Microseconds per 10-message append with maxSize off and on (see the docstring)."""
    queues = {label: f"a{label}-{uuid.uuid4().hex[:8]}" for label in ("off", "on")}
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        for label, queue in queues.items():
            r = await http.post("/api/v1/configure", json={"queue": queue, "options": {
                "maxSize": 0 if label == "off" else 2**31 - 1}})
            r.raise_for_status()
            await http.post("/api/v1/push", json={"items": [
                {"queue": queue, "partition": f"p{i}", "payload": i} for i in range(10)]})
            for group in ("g1", "g2"):
                await http.get(f"/api/v1/pop/queue/{queue}", params={
                    "batch": "100", "partitions": "10", "wait": "false", "autoAck": "true",
                    "consumerGroup": group})
    conn = await asyncpg.connect(database_url)
    spent = {"off": 0.0, "on": 0.0}
    try:
        for block in range(12):
            label = ("off", "on")[block % 2]
            for i in range(50):
                batch = [NewMessage(uuid7(), f"{block}-{i}-{k}", b'{"n": 1}') for k in range(10)]
                start = time.perf_counter()
                await append(conn, [(PartitionName(queues[label], f"p{i % 10}"), batch)])
                spent[label] += time.perf_counter() - start
    finally:
        await conn.close()
    return spent["off"] / 300 * 1e6, spent["on"] / 300 * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = arguments("streams_cost", __doc__ or "", seconds=4.0)
    parser.add_argument("--messages", type=int, default=4000,
                        help="messages each stream variant moves per round")
    args = parser.parse_args(argv)
    bodies = build_corpus().bodies
    rounds = Rounds("streams_cost", args)
    with launch.Postgres(FAST_DATABASE if args.fast_database else None) as pg:
        url = str(launch.run_sync(launch.fresh_database(pg.dsn)))
        with launch.broker(url, args.workers) as server:
            assert server.proc is not None
            _sync(_raw(server.url, 400))  # warm-up
            _sync(_runner(server.url, 400))
            for r in range(args.rounds):
                rounds.add("runner msg/s", _sync(_runner(server.url, args.messages)))
                rounds.add("raw msg/s", _sync(_raw(server.url, args.messages)))
                for label, limit in in_turn([("off", 0), ("on", 2**31 - 1)], r):
                    rate, cpu = _sync(_max_size(
                        server.url, limit, args.connections, args.seconds, bodies,
                        server.proc.pid))
                    rounds.add(f"push msg/s maxSize {label}", rate)
                    rounds.add(f"CPU us/msg maxSize {label}", cpu)
                off, on = _sync(_append_cost(server.url, url))
                rounds.add("append us maxSize off", off)
                rounds.add("append us maxSize on", on)
                rounds.end_round()
    rounds.ratio("runner / raw msg/s", "runner msg/s", "raw msg/s")
    rounds.ratio("push msg/s maxSize on / off", "push msg/s maxSize on", "push msg/s maxSize off")
    rounds.ratio("append (10 msgs) maxSize on / off", "append us maxSize on",
                 "append us maxSize off")
    rounds.difference("append us per flush maxSize on - off", "append us maxSize on",
                      "append us maxSize off")
    rounds.difference("CPU us per pushed msg maxSize on - off", "CPU us/msg maxSize on",
                      "CPU us/msg maxSize off")
    return rounds.finish()

if __name__ == "__main__":
    raise SystemExit(main())
