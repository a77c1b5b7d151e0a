"""A tenant over its rate costs the others nothing measurable: `python -m loadtest probe
tenant_fairness`.

One broker (`--workers` web workers, a fresh database), two tenants pushing to a queue of
the same name (`orders`), auth off and the tenant named by the `x-queen-tenant` header:

- `quiet`: paced single-message pushes at `--quiet-rate` requests/s over
  `--quiet-connections` keep-alive connections, under its own quota (requestsPerSecond five
  times that). Its latency is measured from each request's scheduled send time to its
  answer (so a stalled broker delays every request behind it, not just the one it held:
  no coordinated omission); p50 and p99 in milliseconds.
- `noisy`: paced single-message pushes at `--noisy-rate` requests/s over
  `--noisy-connections` connections from another process, under a quota of
  `--limit` requestsPerSecond: the broker admits about `--limit` per second (plus its
  burst at the start) and answers the rest 429 at the edge, before reading the body or touching the database.

The variants, in turn within each round (reversed every other round), each measured for
`--seconds` after one second of warm-up:

- `alone`: the quiet tenant only;
- `within`: the noisy tenant beside it at 80 % of its limit (nothing refused);
- `over`: the noisy tenant offering `--noisy-rate` (by default ten times its limit) and, on a
  429, waiting the `Retry-After` it was given (+-20 % of jitter) before that connection
  sends again, as the official client does (queen-mq's `retry_429`);
- `flood`: the same offered load, sent on regardless of 429s (a client that ignores
  `Retry-After`): what refusing costs the broker per request. The broker holds each 429 for
  QUEEN_TENANT_REFUSAL_DELAY_MS before answering, which slows such a connection down;
  `--refusal-delay-ms 0` measures without the hold;
- `unlimited` (unless `--no-control`): the flood from a tenant with no quota, so every push is
  written: what the limit spares the quiet tenant.

Reports per variant the quiet tenant's p50 and p99 (ms) and failures, the noisy tenant's
admitted and refused requests per second, the CPU the broker's processes and PostgreSQL
used (cores), and the broker's CPU per refused request (microseconds: the CPU `flood` took
beyond `within`, over the requests it refused); then the same-run ratios of the quiet
tenant's p50 and p99 in each variant to `alone`. The load generator runs on the same machine (its CPU is not the
broker's, but it shares the cores). Load goes only to 127.0.0.1; loops are bounded by time;
only processes this command started are signalled.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import random
import statistics
import time
from collections import Counter
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field

import httpx

from core.waiting import within
from loadtest import launch
from loadtest.probes.rounds import FAST_DATABASE, Rounds, arguments, cpu_seconds, in_turn

HEADER = "x-queen-tenant"
QUEUE = "orders"
WARM_UP = 1.0
RESYNC = 1.0  # a connection this far behind its schedule skips ahead (noisy load only)


@dataclass
class Paced:
    """What one paced load saw: statuses, and latencies (ms) from the scheduled send time."""

    statuses: Counter[int] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    broken: int = 0


async def _send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                request: bytes) -> tuple[int, float]:
    """Send one request; its status and Retry-After (0 without one)."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length, retry = 0, 0.0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"retry-after":
            retry = float(value)
    await reader.readexactly(length)
    return status, retry


def _request(tenant: str, k: int, n: int) -> bytes:
    body = (b'{"items":[{"queue":"' + QUEUE.encode() + b'","partition":"p' + str(k).encode()
            + b'","payload":{"n":' + str(n).encode() + b"}}]}")
    return (b"POST /api/v1/push HTTP/1.1\r\nHost: 127.0.0.1\r\n" + HEADER.encode() + b": "
            + tenant.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


async def _connection(port: int, tenant: str, k: int, interval: float, start: float,
                      measure_from: float, until: float, seen: Paced, resync: bool,
                      polite: bool = False) -> None:
    """One keep-alive connection sending a push every `interval` seconds from `start`
    (offset by its index) until `until`; answers scheduled after `measure_from` count.
    `polite`: after a 429, nothing is sent before its Retry-After has passed."""
    jitter = random.Random(k)
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    due = start
    n = 0
    while due < until:
        now = time.monotonic()
        if due > now:
            await asyncio.sleep(due - now)
        elif resync and now - due > RESYNC:
            due = now
        n += 1
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert reader is not None
            status, retry = await within(10, _send(reader, writer, _request(tenant, k, n)))
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError, IndexError):
            if due >= measure_from:
                seen.broken += 1
            if writer is not None:
                writer.close()
            reader = writer = None
            due += interval
            continue
        if due >= measure_from:
            seen.statuses[status] += 1
            seen.latencies.append((time.monotonic() - due) * 1000)
        due += interval
        if polite and status == 429:  # the official client's wait: Retry-After, +-20 %
            due = max(due, time.monotonic() + retry * jitter.uniform(0.8, 1.2))
    if writer is not None:
        writer.close()


async def _paced(port: int, tenant: str, rate: float, connections: int, seconds: float,
                 *, resync: bool, polite: bool = False) -> Paced:
    """`rate` pushes/s over `connections`, for WARM_UP + `seconds`; the last `seconds` are
    measured."""
    seen = Paced()
    interval = connections / rate
    start = time.monotonic() + 0.05
    until = start + WARM_UP + seconds
    await asyncio.gather(*(
        _connection(port, tenant, k, interval, start + interval * k / connections,
                    start + WARM_UP, until, seen, resync, polite) for k in range(connections)))
    return seen


def noisy_load(port: int, tenant: str, rate: float, connections: int, seconds: float,
               polite: bool) -> dict[int, int]:
    """The noisy tenant's load (run in its own process): answers by status, measured part.
    It starts as the quiet one does and ends a little after it."""
    seen = asyncio.run(_paced(port, tenant, rate, connections, seconds + 0.5, resync=True,
                              polite=polite))
    counts = dict(seen.statuses)
    if seen.broken:
        counts[0] = seen.broken
    return counts


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _set_quotas(url: str, limit: float, burst: int | None, quiet_rate: float,
                workers: int) -> int:
    """The tenants' quotas; waits until the broker's web workers are all counted, so each
    enforces its share (the limit divided by the live processes). The processes counted."""
    with httpx.Client(base_url=url, timeout=10) as api:
        for tenant, quota in (("noisy", {"requestsPerSecond": limit, "requestBurst": burst}),
                              ("quiet", {"requestsPerSecond": quiet_rate * 5})):
            r = api.put(f"/api/v1/tenants/{tenant}/quota", json=quota)
            r.raise_for_status()
        deadline = time.monotonic() + 60
        processes = 0
        while time.monotonic() < deadline:
            processes = int(api.get("/api/v1/tenants").json().get("processes") or 0)
            if processes >= workers:
                break
            time.sleep(0.5)
    time.sleep(3)  # every worker has re-read the quotas (QUEEN_TENANT_REFRESH_MS, 2 s)
    return processes


@dataclass(frozen=True)
class Variant:
    name: str
    noisy_tenant: str | None
    noisy_rate: float
    polite: bool = False


def main(argv: list[str] | None = None) -> int:
    parser = arguments("tenant_fairness", __doc__ or "", seconds=8.0, rounds=5,
                       connections=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quiet-rate", type=float, default=50.0)
    parser.add_argument("--quiet-connections", type=int, default=10)
    parser.add_argument("--limit", type=float, default=50.0,
                        help="the noisy tenant's requestsPerSecond")
    parser.add_argument("--noisy-rate", type=float, default=500.0,
                        help="requests/s the noisy tenant offers in `over`, `flood` and "
                             "`unlimited`")
    parser.add_argument("--burst", type=int, default=None,
                        help="the noisy tenant's requestBurst (default: twice --limit)")
    parser.add_argument("--noisy-connections", type=int, default=16)
    parser.add_argument("--refusal-delay-ms", type=int, default=None,
                        help="the broker's QUEEN_TENANT_REFUSAL_DELAY_MS (default: its own, "
                             "250; 0 answers a 429 at once)")
    parser.add_argument("--variants", nargs="+", metavar="NAME",
                        help="run only these (alone is always run: the ratios' base)")
    parser.add_argument("--no-control", action="store_true",
                        help="skip the `unlimited` variant")
    args = parser.parse_args(argv)
    variants = [Variant("alone", None, 0.0), Variant("within", "noisy", args.limit * 0.8),
                Variant("over", "noisy", args.noisy_rate, polite=True),
                Variant("flood", "noisy", args.noisy_rate)]
    if not args.no_control:
        variants.append(Variant("unlimited", "unlimited", args.noisy_rate))
    if args.variants:
        variants = [v for v in variants if v.name == "alone" or v.name in args.variants]
    rounds = Rounds("tenant_fairness", args)
    spawn = multiprocessing.get_context("spawn")
    with launch.Postgres(FAST_DATABASE if args.fast_database else None) as pg, \
            ProcessPoolExecutor(1, mp_context=spawn) as pool:
        url = str(launch.run_sync(launch.fresh_database(pg.dsn)))
        env = ({} if args.refusal_delay_ms is None
               else {"QUEEN_TENANT_REFUSAL_DELAY_MS": str(args.refusal_delay_ms)})
        with launch.broker(url, args.workers, env=env) as server:
            assert server.proc is not None and pg.proc is not None
            processes = _set_quotas(server.url, args.limit, args.burst, args.quiet_rate,
                                    args.workers)
            rounds.detail("live broker processes sharing the limits", processes)
            pool.submit(noisy_load, server.port, "unlimited", 50, 4, 1.0, False).result()
            launch.run_sync(_paced(server.port, "quiet", args.quiet_rate,
                                   args.quiet_connections, 1.0, resync=False))
            for r in range(args.rounds):
                for v in in_turn(variants, r):
                    noisy: Future[dict[int, int]] | None = None
                    if v.noisy_tenant:
                        noisy = pool.submit(noisy_load, server.port, v.noisy_tenant,
                                            v.noisy_rate, args.noisy_connections, args.seconds,
                                            v.polite)
                        time.sleep(0.3)  # the pool's process has started the load
                    cpu = cpu_seconds(server.proc.pid), cpu_seconds(pg.proc.pid)
                    quiet = launch.run_sync(_paced(server.port, "quiet", args.quiet_rate,
                                                   args.quiet_connections, args.seconds,
                                                   resync=False))
                    assert isinstance(quiet, Paced)
                    span = WARM_UP + args.seconds
                    rounds.add(f"{v.name} broker cores",
                               (cpu_seconds(server.proc.pid) - cpu[0]) / span)
                    rounds.add(f"{v.name} postgres cores",
                               (cpu_seconds(pg.proc.pid) - cpu[1]) / span)
                    rounds.add(f"{v.name} quiet p50 ms", _percentile(quiet.latencies, 0.5))
                    rounds.add(f"{v.name} quiet p99 ms", _percentile(quiet.latencies, 0.99))
                    rounds.add(f"{v.name} quiet failed", quiet.broken + sum(
                        n for status, n in quiet.statuses.items() if status != 201))
                    if noisy is not None:
                        counts = noisy.result()
                        measured = args.seconds + 0.5
                        rounds.add(f"{v.name} noisy admitted/s", counts.get(201, 0) / measured)
                        rounds.add(f"{v.name} noisy refused/s", counts.get(429, 0) / measured)
                        other = {s: n for s, n in counts.items() if s not in (201, 429)}
                        if other:
                            rounds.detail(f"{v.name} round {r + 1} noisy other answers",
                                          json.dumps(other))
                names = {v.name for v in variants}
                if {"flood", "within"} <= names:
                    refused = rounds.figures["flood noisy refused/s"][-1]
                    extra = (rounds.figures["flood broker cores"][-1]
                             - rounds.figures["within broker cores"][-1])
                    rounds.add("broker CPU us per refused request",
                               extra / max(refused, 1) * 1e6)
                rounds.end_round()
    for v in variants[1:]:
        for q in ("p50", "p99"):
            rounds.ratio(f"quiet {q}: {v.name} / alone", f"{v.name} quiet {q} ms",
                         f"alone quiet {q} ms")
    medians = {name: statistics.median(values) for name, values in rounds.figures.items()}
    rounds.detail("quiet p50/p99 ms (medians)", {
        v.name: [round(medians[f"{v.name} quiet {q} ms"], 2) for q in ("p50", "p99")]
        for v in variants})
    return rounds.finish()


if __name__ == "__main__":
    raise SystemExit(main())
