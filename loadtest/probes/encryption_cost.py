"""The cost of encryption at rest on push and pop throughput, measured:
`python -m loadtest probe encryption_cost`.

One broker with QUEEN_ENCRYPTION_KEY (web workers, `queen-broker web`) on a fresh database;
each round runs both variants, alternating, on fresh queues of 10 partitions:

- `plain`: a queue without encryptionEnabled;
- `encrypted`: the same with `encryptionEnabled: true` (every segment sealed, every read
  opens it).

Push: `--connections` keep-alive connections push JSON batches of `--batch` corpus messages
(~1 KiB business events, loadtest/corpus.py) for `--seconds`; msg/s and the broker's CPU
time per message. Pop: as many connections pop that queue (batch 100, autoAck) until it is
drained or `--seconds` pass; msg/s and CPU time per message. Reports medians over the rounds and each figure's
ratio to `plain` (medians of per-round ratios). Same broker, same database, same run: only
the queue's setting differs. Load goes only to 127.0.0.1, loops are bounded by time, and
only the processes this command started are signalled.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

from loadtest import launch
from loadtest.corpus import build_corpus
from loadtest.httpc import Connection, HttpError
from loadtest.probes.rounds import FAST_DATABASE, Rounds, arguments, cpu_seconds, in_turn

VARIANTS = ("plain", "encrypted")
PARTITIONS = 10
POP_BATCH = 100


async def _configure(url: str, queue: str, encrypted: bool) -> None:
    conn = Connection(url)
    try:
        answer = await conn.request("POST", "/api/v1/configure", json.dumps(
            {"queue": queue, "options": {"encryptionEnabled": encrypted}}).encode())
        if answer.status != 200:
            raise RuntimeError(f"configure answered {answer.status}: {answer.body[:200]!r}")
    finally:
        await conn.close()


async def _pusher(url: str, queue: str, k: int, batch: int, bodies: tuple[bytes, ...],
                  until: float) -> int:
    conn, sent, n = Connection(url), 0, 0
    try:
        while time.monotonic() < until:
            items = b",".join(
                b'{"queue":"%s","partition":"p%d","transactionId":"c%d-%d","payload":%s}'
                % (queue.encode(), (k + i) % PARTITIONS, k, n + i,
                   bodies[(k * 7919 + n + i) % len(bodies)]) for i in range(batch))
            try:
                answer = await conn.request("POST", "/api/v1/push",
                                            b'{"items":[' + items + b"]}")
            except (HttpError, TimeoutError):
                continue
            if answer.status == 201:
                sent += batch
            n += batch
    finally:
        await conn.close()
    return sent


async def _popper(url: str, queue: str, until: float) -> int:
    conn, got, empty = Connection(url), 0, 0
    path = f"/api/v1/pop/queue/{queue}?batch={POP_BATCH}&partitions=2&wait=false&autoAck=true"
    try:
        while time.monotonic() < until and empty < 3:
            try:
                answer = await conn.request("GET", path)
            except (HttpError, TimeoutError):
                continue
            if answer.status == 200:
                got += len(json.loads(answer.body)["messages"])
                empty = 0
            elif answer.status == 204:
                empty += 1
                await asyncio.sleep(0.05)
            else:
                raise RuntimeError(f"pop answered {answer.status}: {answer.body[:200]!r}")
    finally:
        await conn.close()
    return got


async def _run(url: str, encrypted: bool, connections: int, batch: int, seconds: float,
               bodies: tuple[bytes, ...], pid: int) -> tuple[float, float, float, float]:
    """Push msg/s, broker CPU us per pushed message, pop msg/s, CPU us per popped one."""
    queue = f"enc-{'on' if encrypted else 'off'}-{uuid.uuid4().hex[:8]}"
    await _configure(url, queue, encrypted)
    cpu = cpu_seconds(pid)
    start = time.monotonic()
    pushed = sum(await asyncio.gather(*(
        _pusher(url, queue, k, batch, bodies, start + seconds) for k in range(connections))))
    push_time = time.monotonic() - start
    cpu = cpu_seconds(pid) - cpu
    pop_cpu = cpu_seconds(pid)
    start = time.monotonic()
    popped = sum(await asyncio.gather(*(
        _popper(url, queue, start + seconds) for _ in range(connections))))
    pop_time = time.monotonic() - start
    pop_cpu = cpu_seconds(pid) - pop_cpu
    return (pushed / push_time, cpu / max(pushed, 1) * 1e6, popped / pop_time,
            pop_cpu / max(popped, 1) * 1e6)


def main(argv: list[str] | None = None) -> int:
    parser = arguments("encryption_cost", __doc__ or "", seconds=5.0)
    parser.add_argument("--batch", type=int, default=10, help="messages per push request")
    args = parser.parse_args(argv)
    bodies = build_corpus().bodies
    names = ("push msg/s", "broker CPU us per pushed msg", "pop msg/s",
             "broker CPU us per popped msg")
    rounds = Rounds("encryption_cost", args)
    env = {"QUEEN_ENCRYPTION_KEY": os.urandom(32).hex()}
    with launch.Postgres(FAST_DATABASE if args.fast_database else None) as pg:
        url = str(launch.run_sync(launch.fresh_database(pg.dsn)))
        with launch.broker(url, args.workers, env=env) as server:
            assert server.proc is not None
            launch.run_sync(_run(server.url, False, args.connections, args.batch, 1.0,
                                 bodies, server.proc.pid))  # warm-up
            for r in range(args.rounds):
                for variant in in_turn(VARIANTS, r):
                    result = launch.run_sync(_run(
                        server.url, variant == "encrypted", args.connections, args.batch,
                        args.seconds, bodies, server.proc.pid))
                    assert isinstance(result, tuple)
                    for name, value in zip(names, result):
                        rounds.add(f"{variant} {name}", value)
                rounds.end_round()
    for name in names:
        rounds.ratio(f"encrypted / plain {name}", f"encrypted {name}", f"plain {name}")
    return rounds.finish()

if __name__ == "__main__":
    raise SystemExit(main())
