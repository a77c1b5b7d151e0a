"""Clients that connect and go away do not use up a web worker's file descriptors
(broker/connection.py), and a worker takes all the descriptors the system allows
(broker/descriptors.py), on a real broker process.

Before: a connection the client closed while no request ran (connected and left, or closed
an idle keep-alive connection) stayed in CLOSE-WAIT for KEEP_ALIVE_TIMEOUT_SECONDS (75 s),
holding its descriptor; a worker at its limit reset every new connection. And a worker kept
the soft limit it was started with (1,024 under most service managers)."""

from __future__ import annotations

import resource
import socket
import time
from collections.abc import Iterator

import httpx
import psutil  # type: ignore[import-untyped]
import pytest

from tests.support import BrokerProcess

REQUEST = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
CHURN = 200  # connections opened and closed: more than the worker has descriptors to spare
SPARE = 60  # descriptors the worker may open beyond those it holds when the churn starts


def _worker(broker: BrokerProcess) -> psutil.Process:
    assert broker.web is not None
    workers = [p for p in psutil.Process(broker.web.pid).children(recursive=True)
               if "broker.worker" in " ".join(p.cmdline())]
    assert len(workers) == 1, workers
    return workers[0]


@pytest.fixture
def one_worker(database_url: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(database_url, workers=1) as proc:
        yield proc


def _connect_and_leave(port: int, *, ask: bool) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        if ask:  # one request, answered, then the client closes the idle connection
            sock.sendall(REQUEST)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")


def _close_waits(worker: psutil.Process, port: int) -> int:
    return sum(1 for c in worker.net_connections(kind="tcp")
               if c.laddr and c.laddr.port == port and c.status == psutil.CONN_CLOSE_WAIT)


def test_connections_the_clients_close_give_their_descriptors_back_at_once(
        one_worker: BrokerProcess, queue_name: str) -> None:
    worker = _worker(one_worker)
    limit = worker.num_fds() + SPARE
    worker.rlimit(psutil.RLIMIT_NOFILE, (limit, limit))
    for n in range(CHURN):
        _connect_and_leave(one_worker.port, ask=n % 2 == 1)
    deadline = time.monotonic() + 5
    while _close_waits(worker, one_worker.port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _close_waits(worker, one_worker.port) == 0
    assert worker.num_fds() < limit
    # The worker still accepts connections and reaches its database.
    with httpx.Client(base_url=one_worker.url, timeout=10) as http:
        pushed = http.post("/api/v1/push",
                           json={"items": [{"queue": queue_name, "payload": {"n": 1}}]})
        assert pushed.status_code == 201, pushed.text


def test_a_worker_raises_its_open_files_limit_to_the_hard_limit(database_url: str) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(256, soft)
    if hard != resource.RLIM_INFINITY and hard <= low:
        pytest.skip(f"the hard limit ({hard}) leaves nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:  # the broker's processes inherit the low soft limit
        broker = BrokerProcess(database_url, workers=1).start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        got_soft, got_hard = _worker(broker).rlimit(psutil.RLIMIT_NOFILE)
        assert got_hard == hard
        assert got_soft > low
        assert got_soft == (hard if hard != resource.RLIM_INFINITY else 1 << 20)
    finally:
        broker.stop()


def test_a_request_whose_client_half_closes_is_answered_then_the_connection_closes(
        broker: BrokerProcess) -> None:
    # A client that shuts its sending side after its requests (two, pipelined) gets both
    # answers, then the close, not the keep-alive timeout's 75 s of an open connection.
    with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
        sock.sendall(REQUEST + REQUEST)
        sock.shutdown(socket.SHUT_WR)
        started, received = time.monotonic(), b""
        while chunk := sock.recv(65536):
            received += chunk
        closed_after = time.monotonic() - started
    assert received.count(b"HTTP/1.1 200") == 2, received
    assert closed_after < 5, f"closed after {closed_after:.1f} s"
