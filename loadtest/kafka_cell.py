"""The Kafka cell: produce + consume throughput through the Kafka listener (confluent-kafka,
librdkafka) against our HTTP path, in one run: `python -m loadtest kafka` (or
`python -m loadtest.kafka_cell`).

One durable embedded PostgreSQL, one broker (web workers) and one Kafka listener
(`python -m broker.kafka`) on one fresh database. Rounds alternate the two paths, so drift
on a shared machine hits them alike; each round moves `--messages` corpus messages (about
1 KiB of JSON each) over `--partitions` partitions of a new topic/queue:

- kafka: one librdkafka producer (acks=all, linger 5 ms, no compression) sends every message
  with a key, to partition i % partitions, and waits for every delivery report; then one
  librdkafka consumer reads every partition from offset 0 until it has them all;
- http: `--connections` connections push JSON batches of `--batch` items
  (POST /api/v1/push, transactionIds t<i>); then as many connections pop batches with
  autoAck (GET /api/v1/pop, no wait) until every message arrived.

The correctness gate, every round and path: each message arrives exactly once, with its
exact bytes (Kafka: value and key; HTTP: the payload as JSON); a delivery error, a
duplicate, a loss or a changed byte fails the run. Figures: msg/s of the produce phase
(first send to last acknowledgement) and of the consume phase, per path, and the ratio
kafka/http per round; the median and range over rounds.

Load goes only to 127.0.0.1; loops are bounded by count and time; only the processes this
command started are stopped, by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

import httpx

from broker.ports import free_port
from loadtest import launch
from loadtest.corpus import build_corpus, payload

_DEADLINE_S = 300.0  # no phase may run longer than this


@dataclass
class Phase:
    messages: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


class GateFailure(Exception):
    """A message lost, duplicated or changed."""


class KafkaListener(launch.ServerProcess):
    """`python -m broker.kafka` on a free port of 127.0.0.1."""

    def __init__(self, database_url: str) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, "DATABASE_URL": database_url, "HOST": "127.0.0.1",
                    "QUEEN_KAFKA_PORT": str(self.port), "LOG_LEVEL": "warning"}

    def __enter__(self) -> Self:
        import socket

        self.started(subprocess.Popen([sys.executable, "-m", "broker.kafka"], env=self.env,
                                      cwd=launch.ROOT, start_new_session=True),
                     lambda: socket.create_connection(("127.0.0.1", self.port), timeout=1)
                     .close(), OSError, name="the Kafka listener", seconds=30, every=0.1)
        return self


def _messages(count: int) -> list[bytes]:
    corpus = build_corpus()
    return [payload(corpus, 0, i, 0.0) for i in range(count)]


# --- the Kafka path ------------------------------------------------------------------------

def kafka_produce(bootstrap: str, topic: str, messages: Sequence[bytes],
                  partitions: int, batch: int | None = None) -> Phase:
    """`batch`: librdkafka's batch.num.messages (most messages per produce batch of one
    partition); librdkafka's default when None."""
    from confluent_kafka import Producer

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                              "compression.type": "none",
                              "queue.buffering.max.messages": 1_000_000}
    if batch is not None:
        config["batch.num.messages"] = batch
    producer = Producer(config)
    failures: list[str] = []
    delivered = [0]

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            delivered[0] += 1

    started = time.monotonic()
    for i, value in enumerate(messages):
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=value,
                                 partition=i % partitions, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(_DEADLINE_S)
    seconds = time.monotonic() - started
    if failures or left or delivered[0] != len(messages):
        raise GateFailure(f"kafka produce: {delivered[0]} delivered of {len(messages)}, "
                          f"{left} left, failures {failures[:3]}")
    return Phase(len(messages), seconds)


def kafka_consume(bootstrap: str, topic: str, messages: Sequence[bytes],
                  partitions: int) -> Phase:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lt-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.max.bytes": 8 << 20, "max.partition.fetch.bytes": 4 << 20})
    seen: dict[int, bytes] = {}
    duplicates = 0
    started = time.monotonic()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while len(seen) < len(messages) and time.monotonic() - started < _DEADLINE_S:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error():
                    raise GateFailure(f"kafka consume: {msg.error()}")
                key = int(msg.key() or b"-1")
                if key in seen:
                    duplicates += 1
                seen[key] = msg.value() or b""
    finally:
        consumer.close()
    seconds = time.monotonic() - started
    changed = sum(1 for i, v in seen.items() if messages[i] != v)
    if len(seen) != len(messages) or duplicates or changed:
        raise GateFailure(f"kafka consume: {len(seen)} of {len(messages)}, {duplicates} "
                          f"duplicates, {changed} changed")
    return Phase(len(messages), seconds)


# --- the HTTP path -------------------------------------------------------------------------

async def http_produce(url: str, queue: str, messages: Sequence[bytes], partitions: int, *,
                       connections: int, batch: int) -> Phase:
    chunks = [list(range(i, min(i + batch, len(messages))))
              for i in range(0, len(messages), batch)]
    todo = asyncio.Queue[list[int]]()
    for chunk in chunks:
        todo.put_nowait(chunk)

    async def pusher() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            while not todo.empty():
                chunk = todo.get_nowait()
                items = b",".join(
                    b'{"queue":%s,"partition":"%d","transactionId":"t%d","payload":%s}'
                    % (json.dumps(queue).encode(), i % partitions, i, messages[i])
                    for i in chunk)
                r = await client.post("/api/v1/push", content=b'{"items":[' + items + b"]}",
                                      headers={"content-type": "application/json"})
                if r.status_code != 201 or any(e["status"] != "queued" for e in r.json()):
                    raise GateFailure(f"http push: {r.status_code} {r.text[:200]}")

    started = time.monotonic()
    await asyncio.gather(*(pusher() for _ in range(connections)))
    return Phase(len(messages), time.monotonic() - started)


async def http_consume(url: str, queue: str, messages: Sequence[bytes], partitions: int, *,
                       connections: int, batch: int) -> Phase:
    seen: dict[int, Any] = {}
    duplicates = [0]
    started = time.monotonic()

    async def popper() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            while len(seen) < len(messages) and time.monotonic() - started < _DEADLINE_S:
                r = await client.get(f"/api/v1/pop/queue/{queue}", params={
                    "batch": str(batch), "partitions": str(partitions), "wait": "false",
                    "autoAck": "true"})
                if r.status_code == 204:
                    await asyncio.sleep(0.01)
                    continue
                if r.status_code != 200:
                    raise GateFailure(f"http pop: {r.status_code} {r.text[:200]}")
                for m in r.json()["messages"]:
                    i = int(m["transactionId"][1:])
                    if i in seen:
                        duplicates[0] += 1
                    seen[i] = m["data"]

    await asyncio.gather(*(popper() for _ in range(connections)))
    seconds = time.monotonic() - started
    changed = sum(1 for i, d in seen.items() if json.loads(messages[i]) != d)
    if len(seen) != len(messages) or duplicates[0] or changed:
        raise GateFailure(f"http consume: {len(seen)} of {len(messages)}, {duplicates[0]} "
                          f"duplicates, {changed} changed")
    return Phase(len(messages), seconds)


# --- the run -------------------------------------------------------------------------------

def run(*, messages: int, partitions: int, rounds: int, connections: int, batch: int,
        workers: int, url: str | None = None, bootstrap: str | None = None,
        database_url: str | None = None, kafka_batch: int | None = None) -> dict[str, Any]:
    """Measure; answer the figures (raise GateFailure when the gate fails). Self-contained
    runs also give the server's CPU per message of every phase (its processes are ours)."""
    data = _messages(messages)
    if url is not None and bootstrap is not None:
        return _rounds(url, bootstrap, data, partitions, rounds, connections, batch,
                       kafka_batch=kafka_batch)
    with launch.Postgres() as pg:
        db = database_url or str(asyncio.run(launch.fresh_database(pg.dsn)))
        with launch.broker(db, workers) as web, KafkaListener(db) as kafka:
            servers = {"broker": web.proc, "kafka": kafka.proc, "postgres": pg.proc}
            return _rounds(web.url, kafka.bootstrap, data, partitions, rounds, connections,
                           batch, kafka_batch=kafka_batch,
                           roots={k: p.pid for k, p in servers.items() if p is not None})


def _sync(phase: Any, url: str, queue: str, data: list[bytes], partitions: int,
          connections: int, batch: int) -> Phase:
    done: Phase = asyncio.run(phase(url, queue, data, partitions, connections=connections,
                                    batch=batch))
    return done


class _Cpu:
    """Server CPU seconds per role over one phase (psutil over each process tree)."""

    def __init__(self, roots: dict[str, int]) -> None:
        from loadtest.procs import TreeSampler

        self.sampler = TreeSampler(dict(roots)) if roots else None

    def __enter__(self) -> Self:
        if self.sampler is not None:
            self.sampler.sample()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sampler is not None:
            self.sampler.sample()

    def us_per_message(self, messages: int, *roles: str) -> dict[str, float]:
        if self.sampler is None or not messages:
            return {}
        cpu = self.sampler.cpu_seconds()
        out = {r: round(cpu.get(r, 0.0) / messages * 1e6, 1) for r in roles}
        out["server"] = round(sum(out.values()), 1)
        return out


def _rounds(url: str, bootstrap: str, data: list[bytes], partitions: int, rounds: int,
            connections: int, batch: int, *, kafka_batch: int | None = None,
            roots: dict[str, int] | None = None) -> dict[str, Any]:
    phases = ("kafka_produce", "http_produce", "kafka_consume", "http_consume")
    figures: dict[str, list[float]] = {k: [] for k in phases}
    cpu: dict[str, list[dict[str, float]]] = {k: [] for k in phases}
    # The Kafka path is served by the listener, the HTTP path by the web workers; each with
    # PostgreSQL (which serves both, so only one phase runs at a time).
    serving = {"kafka": ("kafka", "postgres"), "http": ("broker", "postgres")}
    _create_topic(bootstrap, "lt-warm", partitions)
    for _ in range(rounds):
        topic = f"lt-kafka-{uuid.uuid4().hex[:8]}"
        queue = f"lt-http-{uuid.uuid4().hex[:8]}"
        _create_topic(bootstrap, topic, partitions)
        runs: list[tuple[str, Any]] = [
            ("kafka_produce", functools.partial(kafka_produce, bootstrap, topic, data,
                                                partitions, kafka_batch)),
            ("kafka_consume", functools.partial(kafka_consume, bootstrap, topic, data,
                                                partitions)),
            ("http_produce", functools.partial(_sync, http_produce, url, queue, data,
                                               partitions, connections, batch)),
            ("http_consume", functools.partial(_sync, http_consume, url, queue, data,
                                               partitions, connections, batch))]
        for name, phase in runs:
            with _Cpu(roots or {}) as sampled:
                done: Phase = phase()
            figures[name].append(done.rate)
            used = sampled.us_per_message(done.messages, *serving[name.split("_")[0]])
            if used:
                cpu[name].append(used)
    out: dict[str, Any] = {"messages": len(data), "partitions": partitions, "rounds": rounds,
                           "batch": batch, "kafka_batch": kafka_batch, "gate": "passed"}
    for name, values in figures.items():
        out[name] = {"median": statistics.median(values), "min": min(values),
                     "max": max(values)}
        if cpu[name]:  # µs of server CPU per message: median and range per role
            out[name]["cpu_us_per_message"] = {
                role: {"median": statistics.median(c[role] for c in cpu[name]),
                       "min": min(c[role] for c in cpu[name]),
                       "max": max(c[role] for c in cpu[name])} for role in cpu[name][0]}
    for phase in ("produce", "consume"):
        ratios = [k / h for k, h in zip(figures[f"kafka_{phase}"], figures[f"http_{phase}"])]
        out[f"ratio_{phase}"] = {"median": statistics.median(ratios), "min": min(ratios),
                                 "max": max(ratios)}
    return out


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)])
    for future in futures.values():
        try:
            future.result(30)
        except Exception as exc:
            if "already exists" not in str(exc):
                raise


def add_parser(sub: Any) -> None:
    p = sub.add_parser("kafka", help="the Kafka cell: Kafka listener vs HTTP, with the gate")
    _arguments(p)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--connections", type=int, default=8, help="HTTP connections per phase")
    p.add_argument("--batch", type=int, default=100, help="HTTP items per push and per pop")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--kafka-batch", type=int,
                   help="librdkafka's batch.num.messages (default: librdkafka's own)")
    p.add_argument("--url", help="a running broker's HTTP URL (127.0.0.1), with --bootstrap")
    p.add_argument("--bootstrap", help="its Kafka listener (127.0.0.1:port)")


def command(args: argparse.Namespace) -> int:
    try:
        figures = run(messages=args.messages, partitions=args.partitions, rounds=args.rounds,
                      connections=args.connections, batch=args.batch, workers=args.workers,
                      url=args.url, bootstrap=args.bootstrap, kafka_batch=args.kafka_batch)
    except GateFailure as exc:
        print(f"GATE FAILED: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(figures, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.kafka_cell", description=__doc__)
    _arguments(parser)
    return command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
