"""`python -m loadtest probe http_stack`: what the HTTP stack alone costs the server per request.

The broker is served by hypercorn (fixed by the product owner) through starlette. This probe
measures their CPU per request with nothing of the broker behind them, for push bodies of
`--sizes` corpus messages (about 1 KB each), three variants in turn:

* `asgi`: hypercorn and a bare ASGI app that reads the body and answers a constant
  (loadtest/stack_apps.py): hypercorn's own cost, h11's parsing included;
* `starlette`: the same answer from a starlette route: what starlette's Request, routing
  and Response add;
* `null`: the L-HTTP null app (loadtest/null_app.py), which also decodes the push body into
  the broker's own Struct and answers a verdict per item: the transport ceiling of W1.

Each variant is `hypercorn --worker-class uvloop --workers 1` in a process of its own. A
client of raw keep-alive sockets (`--connections` threads, requests built beforehand,
answers read by their Content-Length; a failed request fails the run) sends `--requests`
requests; the figure is the server's CPU (psutil over its process tree, read outside the
requests) divided by the requests: µs per request. A connection carries at most 900 requests (hypercorn closes one
after 1000), then the client opens another. Same-run ratios: each variant against `asgi`.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from broker.ports import free_port
from loadtest.corpus import build_corpus, payload
from loadtest.launch import ROOT
from loadtest.probes.rounds import Rounds, arguments, cpu_seconds, in_turn

VARIANTS = {
    "asgi": "loadtest.stack_apps:asgi",
    "starlette": "loadtest.stack_apps:starlette",
    "null": "loadtest.null_app:app",
}
PER_CONNECTION = 900  # below hypercorn's keep_alive_max_requests (1000)
_START_SECONDS = 30.0


def push_request(messages: int) -> bytes:
    """A push of `messages` corpus messages, as the load tool's producers send it."""
    corpus = build_corpus()
    items = [b'{"queue":"q","partition":"p0","transactionId":"%s","payload":%s}'
             % (str(uuid.uuid4()).encode(), payload(corpus, 1, k, 1.0))
             for k in range(messages)]
    body = b'{"items":[' + b",".join(items) + b"]}"
    return (b"POST /api/v1/push HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body))


def send_all(port: int, request: bytes, count: int) -> None:
    """Send `request` `count` times on keep-alive connections, one answer at a time."""
    sent = 0
    while sent < count:
        with (socket.create_connection(("127.0.0.1", port), timeout=30) as sock,
              sock.makefile("rb") as reader):
            for _ in range(min(PER_CONNECTION, count - sent)):
                sock.sendall(request)
                length = 0
                while (line := reader.readline()) != b"\r\n":
                    if not line:
                        raise ConnectionError("the server closed the connection")
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                reader.read(length)
                sent += 1


def send_concurrently(port: int, request: bytes, per: int, connections: int) -> None:
    """`send_all` on `connections` threads at once, `per` requests each. A thread's failure
    is raised here: a figure divided by requests that were never answered would be wrong."""
    with ThreadPoolExecutor(connections) as pool:
        sent = [pool.submit(send_all, port, request, per) for _ in range(connections)]
        for done in sent:
            done.result()


class Served:
    """One variant served by hypercorn in a process of its own, until `close`."""

    def __init__(self, app: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hypercorn", "--worker-class", "uvloop", "--workers", "1",
             "--bind", f"127.0.0.1:{self.port}", app],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + _START_SECONDS
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"hypercorn did not start {app}") from None
                time.sleep(0.1)

    def cpu_per_request(self, request: bytes, requests: int, connections: int) -> float:
        """µs of the server's CPU per request, over `requests` sent on `connections`."""
        send_all(self.port, request, 20)  # warm: imports, first allocations
        per = requests // connections
        before = cpu_seconds(self.proc.pid)
        send_concurrently(self.port, request, per, connections)
        return (cpu_seconds(self.proc.pid) - before) / (per * connections) * 1e6

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main(argv: list[str] | None = None) -> int:
    p = arguments("http_stack", __doc__ or "", rounds=3, connections=4, fast_database=False)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100],
                   help="messages per push body")
    p.add_argument("--requests", type=int, default=3600, help="requests per variant and size")
    args = p.parse_args(argv)
    requests = {size: push_request(size) for size in args.sizes}
    rounds = Rounds("http_stack", args)
    rounds.detail("body bytes", {size: len(r) for size, r in requests.items()})
    for r in range(args.rounds):
        for variant in in_turn(list(VARIANTS), r):
            served = Served(VARIANTS[variant])
            try:
                for size in args.sizes:
                    rounds.add(f"{variant} {size} µs/request", served.cpu_per_request(
                        requests[size], args.requests, args.connections))
            finally:
                served.close()
        rounds.end_round()
    for size in args.sizes:
        for variant in ("starlette", "null"):
            rounds.ratio(f"{variant} / asgi, {size} messages", f"{variant} {size} µs/request",
                         f"asgi {size} µs/request")
    return rounds.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
