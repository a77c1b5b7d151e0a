"""The web tier's process model, measured: `python -m loadtest.supervision`.

Compares the broker's web workers under hypercorn's own multi-worker runner (what `serve`
ran before) and under the `serve` / `web` supervisor (one socket, N single-worker processes),
in the same run, on a durable embedded PostgreSQL:

- push throughput: `--connections` keep-alive connections sending single-message pushes for
  `--seconds`, alternating the two runners `--rounds` times (fresh database each time);
- a killed worker: the same load, one worker killed with SIGKILL after 2 s; counts requests
  that failed (connection error or a status other than 201) and whether the broker still
  answers at the end.

Every request gets one attempt (no client retry), so a failure is counted as it happened.
Load goes only to 127.0.0.1; every loop is bounded by time; only processes this command
started are signalled, by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import signal
import statistics
import time
import uuid
from dataclasses import dataclass, field

import psutil  # type: ignore[import-untyped]

from core.waiting import within
from loadtest import launch

RUNNERS = ("hypercorn", "supervisor")


@dataclass
class Tally:
    ok: int = 0
    failed: int = 0
    ok_times: list[float] = field(default_factory=list)


async def _send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                request: bytes) -> int:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


async def _connection(port: int, queue: str, k: int, until: float, tally: Tally,
                      tokens: list[str] | None = None) -> None:
    """One keep-alive connection pushing until `until`; reconnects after a failure. With
    `tokens`, each request carries the next one as a bearer token."""
    n = 0
    writer: asyncio.StreamWriter | None = None
    reader: asyncio.StreamReader | None = None
    while time.monotonic() < until:
        body = (b'{"items":[{"queue":"' + queue.encode() + b'","partition":"p'
                + str(k % 10).encode() + b'","transactionId":"c' + str(k).encode() + b"-"
                + str(n).encode() + b'","payload":{"n":' + str(n).encode() + b"}}]}")
        auth = (b"Authorization: Bearer " + tokens[n % len(tokens)].encode()
                + b"\r\n") if tokens else b""
        n += 1
        request = (b"POST /api/v1/push HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth
                   + b"Content-Type: application/json\r\nContent-Length: "
                   + str(len(body)).encode() + b"\r\n\r\n" + body)
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert reader is not None
            status = await within(10, _send(reader, writer, request))
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError, IndexError):
            tally.failed += 1
            if writer is not None:
                writer.close()
            writer = reader = None
            await asyncio.sleep(0.05)
            continue
        if status == 201:
            tally.ok += 1
            tally.ok_times.append(time.monotonic())
        else:
            tally.failed += 1
    if writer is not None:
        writer.close()


async def _load(port: int, connections: int, seconds: float,
                tokens: list[str] | None = None) -> Tally:
    queue = "sup-" + uuid.uuid4().hex[:8]
    tally = Tally()
    until = time.monotonic() + seconds
    # Each connection cycles through its own share of the tokens (all of them if few).
    shares = [tokens[k::connections] if tokens and len(tokens) >= connections else tokens
              for k in range(connections)]
    await asyncio.gather(*(_connection(port, queue, k, until, tally, shares[k])
                           for k in range(connections)))
    return tally


def _workers(server: launch.Server) -> list[int]:
    """The server's worker processes (hypercorn's spawned children, or broker.worker)."""
    assert server.proc is not None
    pids = []
    try:
        children = psutil.Process(server.proc.pid).children()
    except psutil.Error:
        return []
    for child in children:
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:  # exited (or a zombie) meanwhile: not a serving worker
            continue
        if "broker.worker" in cmdline or "spawn_main" in cmdline:
            pids.append(child.pid)
    return sorted(pids)


def _answers(server: launch.Server) -> bool:
    import httpx

    try:
        return httpx.get(server.url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def throughput(dsn: str, runner: str, workers: int, connections: int, seconds: float) -> float:
    url = str(launch.run_sync(launch.fresh_database(dsn)))
    with launch.broker(url, workers, supervised=runner == "supervisor") as server:
        warm = launch.run_sync(_load(server.port, connections, 1.0))
        assert isinstance(warm, Tally)
        tally = launch.run_sync(_load(server.port, connections, seconds))
        assert isinstance(tally, Tally)
    return tally.ok / seconds


def kill_one(dsn: str, runner: str, workers: int, connections: int) -> dict[str, object]:
    url = str(launch.run_sync(launch.fresh_database(dsn)))
    with launch.broker(url, workers, supervised=runner == "supervisor") as server:
        before = _workers(server)

        async def scenario() -> tuple[Tally, float, float]:
            loop = asyncio.get_running_loop()
            load = asyncio.ensure_future(_load(server.port, connections, 8.0))
            await asyncio.sleep(2.0)
            killed_at = time.monotonic()
            await loop.run_in_executor(None, os.kill, before[0], signal.SIGKILL)
            tally = await load
            return tally, killed_at, time.monotonic()

        result = launch.run_sync(scenario())
        assert isinstance(result, tuple)
        tally, killed_at, ended_at = result
        after = _workers(server)
        serving = _answers(server)
    gap = _longest_gap(tally.ok_times, killed_at, ended_at)
    return {"ok": tally.ok, "failed": tally.failed, "serving_after": serving,
            "workers_after": len(after), "replaced": before[0] not in after and len(after)
            == workers, "longest_gap_after_kill_s": round(gap, 2)}


def _longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest stretch between `start` and `end` without a successful answer."""
    points = [start, *sorted(t for t in times if t >= start), end]
    return max(b - a for a, b in itertools.pairwise(points))


FAST_DATABASE = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def load_arguments(prog: str, description: str, seconds: float) -> argparse.ArgumentParser:
    """The options of a same-run comparison of push throughput (this one, auth_cost)."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=seconds)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fast-database", action="store_true",
                        help="PostgreSQL without fsync, so the disk's jitter does not drown the "
                             "difference between what is compared (not a broker benchmark)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = load_arguments("python -m loadtest.supervision", __doc__ or "", 8.0).parse_args(argv)
    rates: dict[str, list[float]] = {r: [] for r in RUNNERS}
    with launch.Postgres(FAST_DATABASE if args.fast_database else None) as pg:
        for _ in range(args.rounds):
            for runner in RUNNERS:
                rate = throughput(pg.dsn, runner, args.workers, args.connections, args.seconds)
                rates[runner].append(rate)
                print(f"{runner:10} push req/s {rate:8.1f}", flush=True)
        kills = {runner: kill_one(pg.dsn, runner, args.workers, args.connections // 2)
                 for runner in RUNNERS}
    medians = {r: statistics.median(v) for r, v in rates.items()}
    print()
    for runner in RUNNERS:
        print(f"{runner:10} median push req/s {medians[runner]:8.1f} "
              f"(runs: {', '.join(f'{v:.0f}' for v in rates[runner])})")
    paired = sorted(s / h for h, s in zip(rates["hypercorn"], rates["supervisor"]))
    print(f"supervisor / hypercorn push req/s: {medians['supervisor'] / medians['hypercorn']:.3f}"
          f" (medians); per round {statistics.median(paired):.3f} median, "
          f"{paired[0]:.2f}-{paired[-1]:.2f} range")
    for runner, figures in kills.items():
        print(f"{runner:10} one worker killed (SIGKILL) under load: {figures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
