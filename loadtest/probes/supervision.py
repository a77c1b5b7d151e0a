"""The web tier's process model, measured: `python -m loadtest probe supervision`.

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

import asyncio
import itertools
import os
import signal
import time
import uuid
from dataclasses import dataclass, field

import psutil  # type: ignore[import-untyped]

from core.waiting import within
from loadtest import launch
from loadtest.probes.rounds import FAST_DATABASE, Rounds, arguments, in_turn

RUNNERS = ("hypercorn", "supervisor")


@dataclass
class RequestTally:
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


async def _connection(port: int, queue: str, k: int, until: float, tally: RequestTally,
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
                tokens: list[str] | None = None) -> RequestTally:
    queue = "sup-" + uuid.uuid4().hex[:8]
    tally = RequestTally()
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
        assert isinstance(warm, RequestTally)
        tally = launch.run_sync(_load(server.port, connections, seconds))
        assert isinstance(tally, RequestTally)
    return tally.ok / seconds


def kill_one(dsn: str, runner: str, workers: int, connections: int) -> dict[str, object]:
    url = str(launch.run_sync(launch.fresh_database(dsn)))
    with launch.broker(url, workers, supervised=runner == "supervisor") as server:
        before = _workers(server)

        async def scenario() -> tuple[RequestTally, float, float]:
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


def main(argv: list[str] | None = None) -> int:
    args = arguments("supervision", __doc__ or "", seconds=8.0).parse_args(argv)
    rounds = Rounds("supervision", args)
    with launch.Postgres(FAST_DATABASE if args.fast_database else None) as pg:
        for r in range(args.rounds):
            for runner in in_turn(RUNNERS, r):
                rounds.add(f"{runner} push req/s",
                           throughput(pg.dsn, runner, args.workers, args.connections,
                                      args.seconds))
            rounds.end_round()
        for runner in RUNNERS:
            rounds.detail(f"{runner}: one worker killed (SIGKILL) under load",
                          kill_one(pg.dsn, runner, args.workers, args.connections // 2))
    rounds.ratio("supervisor / hypercorn push req/s", "supervisor push req/s",
                 "hypercorn push req/s")
    return rounds.finish()


if __name__ == "__main__":
    raise SystemExit(main())
