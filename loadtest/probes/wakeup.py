"""Long-poll wake-up latency across worker processes:
`python -m loadtest probe wakeup --url ...`.

Parks pops on connections served by one web worker and pushes through a connection served by
another, so every wake-up has to travel through PostgreSQL LISTEN/NOTIFY. Each keep-alive
connection stays with the worker that accepted it; `/metrics` names that worker's pid.
Latency is measured from the moment the push request is sent to the moment the parked pop's
answer arrives: an upper bound on the wake-up itself, since it includes the push's own commit.
Bounded: `--trials` pushes, each waited for at most `--timeout-ms`.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid

import httpx

from loadtest.probes.rounds import Rounds, arguments

_MAX_CONNECT_ATTEMPTS = 40


async def _client_on_worker(url: str, avoid: int | None) -> tuple[httpx.AsyncClient, int]:
    """A one-connection client whose worker pid differs from `avoid` (if given)."""
    for _ in range(_MAX_CONNECT_ATTEMPTS):
        client = httpx.AsyncClient(base_url=url, timeout=30,
                                   limits=httpx.Limits(max_connections=1))
        pid = int((await client.get("/metrics")).json()["pid"])
        if avoid is None or pid != avoid:
            return client, pid
        await client.aclose()
    raise RuntimeError("could not reach a second worker: is the broker running >= 2 workers?")


async def measure(url: str, trials: int, timeout_ms: int) -> list[float]:
    queue = "wakeup-" + uuid.uuid4().hex[:8]
    popper, popper_pid = await _client_on_worker(url, None)
    pusher, _ = await _client_on_worker(url, popper_pid)
    latencies: list[float] = []
    try:
        # Create the queue so the parked pop is scoped to it from its first check.
        await pusher.post("/api/v1/configure", json={"queue": queue})
        for i in range(trials):
            pop = asyncio.create_task(popper.get(
                f"/api/v1/pop/queue/{queue}",
                params={"wait": "true", "timeout": str(timeout_ms), "autoAck": "true"}))
            await asyncio.sleep(0.3)  # parked, past its first immediate check
            sent = time.perf_counter()
            await pusher.post("/api/v1/push", json={"items": [
                {"queue": queue, "payload": {"trial": i}}]})
            answer = await pop
            arrived = time.perf_counter()
            if answer.status_code == 200:
                latencies.append((arrived - sent) * 1000)
    finally:
        await pusher.delete(f"/api/v1/resources/queues/{queue}")
        await popper.aclose()
        await pusher.aclose()
    return latencies


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = arguments("wakeup", __doc__ or "", rounds=1, connections=None,
                       fast_database=False)
    parser.add_argument("--url", default="http://127.0.0.1:6632")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--timeout-ms", type=int, default=5000)
    args = parser.parse_args(argv)
    if not args.url.startswith(("http://127.0.0.1", "http://localhost")):
        parser.error("only a broker on this machine (127.0.0.1) may be measured")
    rounds = Rounds("wakeup", args)
    missed = 0
    for _ in range(args.rounds):
        latencies = asyncio.run(measure(args.url, args.trials, args.timeout_ms))
        missed += args.trials - len(latencies)
        if latencies:
            rounds.add("wake-up p50 ms", statistics.median(latencies))
            rounds.add("wake-up p99 ms", _percentile(latencies, 0.99))
            rounds.add("wake-up max ms", max(latencies))
        rounds.end_round()
    rounds.detail("what", "push sent -> parked pop answered, across worker processes")
    rounds.detail("trials without a wake-up", missed)
    status = rounds.finish()
    return status if missed == 0 else 1

if __name__ == "__main__":
    sys.exit(main())
