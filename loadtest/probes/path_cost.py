"""The broker's CPU per message on its push, pop and ack paths, without the HTTP stack:
`python -m loadtest probe path_cost [--root ../before]`.

A process of its own (run from the checkout measured: this one, or `--root`'s) builds the
broker's ASGI app on a fresh database of one durable embedded PostgreSQL and calls it the
way hypercorn would, one request at a time: `--messages` messages in pushes of `--batch`
over `--partitions` partitions, then pops of `--pop-batch` (`partitions=4`, no wait) each
acknowledged by one ack batch, until the queue is drained. The process's own CPU
(getrusage) is read around each request, so it counts that request's work and the flushes
it waits for (the coalescer, the ack batcher, the announcement), not the harness's; the
figure per path is the median over chunks of `--chunk` requests, µs per message. The
PostgreSQL server's CPU (psutil over the postmaster and its children, whose clock ticks are
too coarse for a chunk) is summed over every request of a path and divided by its messages:
`pg push`, `pg pop`, `pg ack` (requests run one at a time, so each path's statements are
the server's only work but its background writers').

With `--root`, rounds alternate the two checkouts (reversed every other round) and the
report gives, per path, this checkout ÷ the other, round by round. What it leaves out is the
HTTP stack (measured apart: `python -m loadtest run W1` against L-HTTP).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadtest import launch
from loadtest.probes.rounds import Rounds, arguments, cpu_seconds, in_turn

PATHS = ("push", "pop", "ack")


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


class CpuWindow:
    """CPU seconds of this process and of the PostgreSQL server over one stretch of requests.

    The server's reading walks /proc with psutil, in this process: a few milliseconds of
    this process's CPU each time, as much as a pop of 400 messages costs the broker. So it is
    taken outside this process's reading at both ends (the server's first at the start,
    last at the end). Read inside, it was counted as the broker's: about 9 µs more per
    message of a pop or an ack of 400, 3.5 per pushed message (one reading per ten
    pushes of 100)."""

    def __init__(self, server_cpu: Callable[[], float],
                 own_cpu: Callable[[], float] = _cpu) -> None:
        self._server_cpu = server_cpu
        self._own_cpu = own_cpu
        self._server_at = server_cpu()
        self._own_at = own_cpu()

    def close(self) -> tuple[float, float]:
        """(this process's CPU seconds, the server's) since the window opened."""
        own = self._own_cpu() - self._own_at
        return own, self._server_cpu() - self._server_at


async def _server_cpu(url: str) -> Any:
    """A reading of the PostgreSQL server's CPU seconds (its postmaster and every child)."""
    import asyncpg
    import psutil  # type: ignore[import-untyped]

    conn = await asyncpg.connect(url)
    try:
        postmaster = psutil.Process(int(await conn.fetchval("SELECT pg_backend_pid()"))).parent()
    finally:
        await conn.close()

    pid = postmaster.pid
    return lambda: cpu_seconds(pid)


async def _call(app: Any, method: str, path: str, body: bytes = b"",
                query: bytes = b"") -> tuple[int, bytes]:
    """One request through the ASGI app, as an HTTP server would hand it over."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": query, "root_path": "", "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80), "state": {},
             "headers": [(b"host", b"probe"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}
    sent = False
    status = 0
    parts: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never goes away
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(parts)


def _bodies(messages: int, batch: int, partitions: int) -> list[bytes]:
    from loadtest.corpus import build_corpus, payload

    corpus = build_corpus()
    out = []
    for r in range(max(1, messages // batch)):
        items = [b'{"queue":"q","partition":"p%d","transactionId":"t%d","payload":%s}'
                 % (r % partitions, r * batch + k, payload(corpus, 1, r * batch + k, 1.0))
                 for k in range(batch)]
        out.append(b'{"items":[' + b",".join(items) + b"]}")
    return out


async def _measure(url: str, args: argparse.Namespace) -> dict[str, float]:
    from broker.app import create_app
    from core.settings import Settings

    app = create_app(Settings.from_env({"DATABASE_URL": url}))
    bodies = _bodies(args.messages, args.batch, args.partitions)
    samples: dict[str, list[tuple[float, int]]] = {p: [] for p in PATHS}
    server = {p: 0.0 for p in PATHS}  # the server's CPU seconds per path
    server_cpu = await _server_cpu(url)
    async with app.router.lifespan_context(app):
        status, answer = await _call(app, "POST", "/api/v1/push", bodies[0])  # warm-up
        assert status == 201, answer[:300]
        for i in range(1, len(bodies), args.chunk):
            window = CpuWindow(server_cpu)
            for body in bodies[i:i + args.chunk]:
                status, answer = await _call(app, "POST", "/api/v1/push", body)
                assert status == 201, answer[:300]
            own, by_server = window.close()
            samples["push"].append((own, len(bodies[i:i + args.chunk]) * args.batch))
            server["push"] += by_server
        query = b"batch=%d&partitions=4&wait=false&consumerGroup=g" % args.pop_batch
        while True:
            window = CpuWindow(server_cpu)
            status, answer = await _call(app, "GET", "/api/v1/pop/queue/q", query=query)
            popped, by_server = window.close()
            server["pop"] += by_server
            if status == 204:
                break
            assert status == 200, answer[:300]
            messages = json.loads(answer)["messages"]
            samples["pop"].append((popped, len(messages)))
            acks = json.dumps({"consumerGroup": "g", "acknowledgments": [
                {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                 "status": "completed", "leaseId": m["leaseId"]} for m in messages]}).encode()
            window = CpuWindow(server_cpu)
            status, answer = await _call(app, "POST", "/api/v1/ack/batch", acks)
            acked, by_server = window.close()
            samples["ack"].append((acked, len(messages)))
            server["ack"] += by_server
            assert status == 200 and all(a["success"] for a in json.loads(answer)), answer[:300]
    out = {}
    for path, taken in samples.items():
        # chunks of `chunk` requests for pops and acks too
        chunks = [taken[i:i + args.chunk] for i in range(0, len(taken), args.chunk)]
        per = [sum(c for c, _ in chunk) / sum(n for _, n in chunk) * 1e6
               for chunk in chunks if sum(n for _, n in chunk)]
        out[path] = statistics.median(per) if per else 0.0
        messages = sum(n for _, n in taken)
        out[f"pg {path}"] = server[path] / messages * 1e6 if messages else 0.0
    return out


def _worker(argv: list[str]) -> int:
    """The measuring process (run from the checkout measured): prints its figures."""
    import uvloop

    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    for name in ("messages", "batch", "partitions", "pop-batch", "chunk"):
        parser.add_argument(f"--{name}", type=int, required=True)
    args = parser.parse_args(argv)
    from broker.collector import tune_garbage_collector

    tune_garbage_collector()  # as a web worker runs
    print(json.dumps(uvloop.run(_measure(args.database_url, args))))
    return 0


def _run_in(root: Path, database_url: str, args: argparse.Namespace) -> dict[str, float]:
    # Imported here, in the process that compares: the worker runs with another checkout's
    # loadtest first on its path, which may not have it.
    from loadtest.probes.rounds import figures_from_checkout

    return figures_from_checkout(
        root, __file__,
        ["--database-url", database_url, "--messages", str(args.messages),
         "--batch", str(args.batch), "--partitions", str(args.partitions),
         "--pop-batch", str(args.pop_batch), "--chunk", str(args.chunk)],
        timeout=1800)


def main(argv: list[str] | None = None) -> int:
    p = arguments("path_cost", __doc__ or "", rounds=3, connections=None, fast_database=False)
    p.add_argument("--root", type=Path, help="another checkout, measured in the same run")
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--partitions", type=int, default=200)
    p.add_argument("--pop-batch", type=int, default=500)
    p.add_argument("--chunk", type=int, default=10, help="requests per CPU reading")
    args = p.parse_args(argv)
    sides = [("this", launch.ROOT)] + ([("other", args.root.resolve())] if args.root else [])
    rounds = Rounds("path_cost", args)
    with launch.Postgres() as pg:
        for r in range(args.rounds):
            for side, root in in_turn(sides, r):
                url = asyncio.run(launch.fresh_database(pg.dsn, migrate=False))
                for path, value in _run_in(root, url, args).items():
                    rounds.add(f"{side} {path} µs/msg", value)
            rounds.end_round()
    rounds.against_checkout(args.root, [*PATHS, *(f"pg {p}" for p in PATHS)])
    return rounds.finish()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        sys.exit(_worker(sys.argv[2:]))
    sys.exit(main())
