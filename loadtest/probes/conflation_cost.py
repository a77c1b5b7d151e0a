"""Pop autopilot and conflation, measured: `python -m loadtest probe conflation_cost`.

One broker (web workers) on a fresh database; each round runs every variant, alternating
which goes first:

- `default` vs `batch100`: the official client's `consume()` with no batch and no
  partitions set (its default: autopilot on, the broker sizes width and batch) against the
  same consumer with `.batch(100)`, each draining `--messages` messages preloaded over
  `--partitions` partitions with `--concurrency` workers (the W2 shape: 100 partitions,
  16 consumers, one ack per handled batch). Throughput: messages/s until every one is
  handled.
- `conflating` vs `plain`: `--updates` updates over `--keys` partitions drained by a
  conflating group and by a plain group of the same queue (pops of batch 100 without
  autopilot, each delivery acked with one `/ack/batch`): deliveries per pop, and broker CPU
  (web workers, psutil) per delivered message.

Figures are medians over the rounds; ratios are of those medians. Load goes only to
127.0.0.1; only processes this command started are signalled.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
from queen import Queen

from loadtest import launch
from loadtest.probes.rounds import FAST_DATABASE, Rounds, arguments, cpu_seconds, in_turn


async def _preload(http: httpx.AsyncClient, queue: str, n: int, partitions: int) -> None:
    for start in range(0, n, 1000):
        r = await http.post("/api/v1/push", json={"items": [
            {"queue": queue, "partition": f"p{i % partitions}", "payload": {"n": i}}
            for i in range(start, min(start + 1000, n))]})
        r.raise_for_status()


async def _consume(url: str, n: int, partitions: int, concurrency: int,
                   batch: int | None) -> float:
    queue = f"a-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        await _preload(http, queue, n, partitions)
    handled = 0
    done = asyncio.Event()

    async def handle(messages: Any) -> None:
        nonlocal handled
        handled += len(messages) if isinstance(messages, list) else 1
        if handled >= n:
            done.set()

    async with Queen(url) as client:
        builder = client.queue(queue).group("g").concurrency(concurrency).timeout_millis(500)
        if batch is not None:
            builder = builder.batch(batch)
        start = time.monotonic()
        await builder.consume(handle, signal=done)
        return n / (time.monotonic() - start)


async def _drain(url: str, queue: str, group: str, conflation: bool,
                 pid: int) -> tuple[float, float]:
    """Pop and ack until the group has nothing left: (deliveries per pop, CPU us per
    delivered message)."""
    pops = delivered = 0
    cpu = cpu_seconds(pid)
    params = {"batch": "100", "partitions": "100", "wait": "false", "consumerGroup": group}
    if conflation:
        params["conflation"] = "true"
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        while True:
            r = await http.get(f"/api/v1/pop/queue/{queue}", params=params)
            messages = r.json()["messages"] if r.status_code == 200 else []
            if not messages:
                break
            pops += 1
            delivered += len(messages)
            acked = await http.post("/api/v1/ack/batch", json={
                "consumerGroup": group, "acknowledgments": [
                    {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                     "leaseId": m["leaseId"], "status": "completed"} for m in messages]})
            acked.raise_for_status()
    return delivered / max(pops, 1), (cpu_seconds(pid) - cpu) / max(delivered, 1) * 1e6


async def _conflation(url: str, updates: int, keys: int, pid: int) -> dict[str, float]:
    queue = f"c-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        await _preload(http, queue, updates, keys)
    per_pop_c, cpu_c = await _drain(url, queue, "conflating", True, pid)
    per_pop_p, cpu_p = await _drain(url, queue, "plain", False, pid)
    return {"conflating deliveries/pop": per_pop_c, "plain deliveries/pop": per_pop_p,
            "conflating CPU us/delivery": cpu_c, "plain CPU us/delivery": cpu_p}


def main(argv: list[str] | None = None) -> int:
    parser = arguments("conflation_cost", __doc__ or "", connections=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--updates", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=500)
    args = parser.parse_args(argv)
    rounds = Rounds("conflation_cost", args)
    with launch.Postgres(FAST_DATABASE if args.fast_database else None) as pg:
        url = str(launch.run_sync(launch.fresh_database(pg.dsn)))
        with launch.broker(url, args.workers) as server:
            assert server.proc is not None
            asyncio.run(_consume(server.url, 2000, args.partitions, args.concurrency, None))
            for r in range(args.rounds):
                variants: list[tuple[str, int | None]] = [("default", None), ("batch100", 100)]
                for label, batch in in_turn(variants, r):
                    rounds.add(f"{label} msg/s", asyncio.run(_consume(
                        server.url, args.messages, args.partitions, args.concurrency, batch)))
                for k, v in asyncio.run(_conflation(server.url, args.updates, args.keys,
                                                    server.proc.pid)).items():
                    rounds.add(k, v)
                rounds.end_round()
    rounds.ratio("default / batch100 consume() msg/s", "default msg/s", "batch100 msg/s")
    rounds.ratio("CPU per delivery conflating / plain", "conflating CPU us/delivery",
                 "plain CPU us/delivery")
    return rounds.finish()

if __name__ == "__main__":
    raise SystemExit(main())
