"""Database outages and restarts, on a PostgreSQL and a broker of this module's own.

Promises checked (1, 7 and 8 of docs/architecture/reliability.md): a push answers `queued` only after its commit, so
every such push survives a crash of PostgreSQL; while the database is away pushes are taken
by the push spool and answer `buffered` (never 500, never `queued`; wire-protocol §11) and
/health answers 503; when it returns, the broker drains the spool into it by itself, every
buffered message stored once, in the order the producer was answered.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.embedded import EmbeddedPostgres, stop_process
from tests.support import (
    BrokerProcess,
    fetch_records,
    restart_embedded,
    server_data_dir,
    wait_for,
)


class Cluster:
    """One PostgreSQL data directory and a 2-worker broker on it, each restartable."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.pg: EmbeddedPostgres | None = None
        self.pg_proc: subprocess.Popen[bytes] | None = None
        self.broker: BrokerProcess | None = None
        self.port: int | None = None

    def start_pg(self) -> None:
        # synchronous_commit on: a commit the broker acknowledged must survive a crash of the
        # server process (fsync may stay off: the OS page cache outlives the process).
        self.pg, self.pg_proc = restart_embedded(self.data_dir, synchronous_commit="on")

    def stop_pg(self, sig: int) -> None:
        assert self.pg_proc is not None
        if sig == signal.SIGKILL:
            self.pg_proc.kill()
            self.pg_proc.wait()
        else:
            stop_process(self.pg_proc, sig)
        self.pg_proc = None

    def start_broker(self) -> BrokerProcess:
        assert self.pg is not None
        self.broker = BrokerProcess(self.pg.dsn, workers=2, port=self.port).start()
        self.port = self.broker.port  # same address across restarts
        return self.broker

    def stop_broker(self) -> None:
        if self.broker is not None:
            self.broker.stop()
            self.broker = None

    def ensure_running(self) -> None:
        if self.pg_proc is None or self.pg_proc.poll() is not None:
            self.start_pg()
        if self.broker is None:
            self.start_broker()
        else:
            self.broker.wait_healthy(30)

    def stop(self) -> None:
        self.stop_broker()
        if self.pg_proc is not None:
            stop_process(self.pg_proc, signal.SIGINT)
            self.pg_proc = None

    @property
    def url(self) -> str:
        assert self.broker is not None
        return self.broker.url


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with server_data_dir("queen-outage-") as data:
        c = Cluster(data)
        try:
            c.start_pg()
            c.start_broker()
            yield c
        finally:
            c.stop()


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[httpx.AsyncClient]:
    cluster.ensure_running()
    async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as c:
        yield c


async def _push(client: httpx.AsyncClient, items: list[dict[str, Any]]) -> httpx.Response:
    return await client.post("/api/v1/push", json={"items": items})


async def test_restart_of_broker_and_database_keeps_every_record(
        cluster: Cluster, client: httpx.AsyncClient, queue_name: str) -> None:
    items = [{"queue": queue_name, "partition": f"p{i % 2}", "transactionId": f"t{i}",
              "payload": {"i": i, "text": "é" * i}} for i in range(40)]
    for chunk in (items[:15], items[15:]):
        r = await _push(client, chunk)
        assert [e["status"] for e in r.json()] == ["queued"] * len(chunk)
    before = {p: await fetch_records(client, queue_name, p) for p in ("p0", "p1")}
    assert [len(before[p]["records"]) for p in ("p0", "p1")] == [20, 20]

    cluster.stop_broker()
    cluster.stop_pg(signal.SIGINT)
    cluster.start_pg()
    cluster.start_broker()

    async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as fresh:
        after = {p: await fetch_records(fresh, queue_name, p) for p in ("p0", "p1")}
        assert after == before
        # Offsets and dedup state survived too: a repeat is a duplicate, a new id continues.
        r = await _push(fresh, [items[0], {"queue": queue_name, "partition": "p0",
                                           "transactionId": "t-new", "payload": "new"}])
        assert [e["status"] for e in r.json()] == ["duplicate", "queued"]
        tail = await fetch_records(fresh, queue_name, "p0", offset=20)
        assert [(rec["offset"], rec["payload"]) for rec in tail["records"]] == [(20, "new")]


@dataclass
class Ledger:
    """What producers were told, push by push."""

    queued: set[str] = field(default_factory=set)
    buffered: set[str] = field(default_factory=set)
    answered: dict[str, list[str]] = field(default_factory=dict)  # per producer, in order
    errors: list[tuple[int, str, str | None]] = field(default_factory=list)  # status, error, RA
    other_failed: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)


async def _producer(url: str, queue: str, name: str, ledger: Ledger,
                    stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        n = 0
        while not stop.is_set():
            txid = f"{name}-{n}"
            n += 1
            try:
                r = await _push(client, [{"queue": queue, "partition": name,
                                          "transactionId": txid, "payload": {"n": n}}])
            except httpx.TransportError:
                await asyncio.sleep(0.05)
                continue
            ledger.statuses.append(r.status_code)
            if r.status_code == 201:
                (entry,) = r.json()
                if entry["status"] in ("queued", "buffered"):
                    (ledger.queued if entry["status"] == "queued" else ledger.buffered).add(txid)
                    ledger.answered.setdefault(name, []).append(txid)
                else:
                    ledger.other_failed.append(entry)
            else:
                ledger.errors.append((r.status_code, r.json().get("error", ""),
                                      r.headers.get("retry-after")))
            await asyncio.sleep(0.005)


def _at_least(ledger: Ledger, count: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return len(ledger.queued) >= count
    return check


async def _wait_until_push_succeeds(client: httpx.AsyncClient, queue: str,
                                    timeout: float) -> float:
    started = time.monotonic()
    while True:
        r = await _push(client, [{"queue": queue, "partition": "probe", "payload": "probe"}])
        if r.status_code == 201 and r.json()[0]["status"] == "queued":
            return time.monotonic() - started
        assert r.status_code in (201, 503), r.text
        if time.monotonic() - started > timeout:
            raise AssertionError(f"no successful push {timeout} s after the database returned")
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGINT],
                         ids=["kill-9", "fast-shutdown"])
async def test_database_stopped_mid_run_spools_pushes_then_recovers_losing_nothing(
        cluster: Cluster, client: httpx.AsyncClient, queue_name: str,
        stop_signal: int) -> None:
    ledger = Ledger()
    stop = asyncio.Event()
    producers = [asyncio.create_task(_producer(cluster.url, queue_name, f"p{k}", ledger, stop))
                 for k in range(4)]
    try:
        await wait_for(_at_least(ledger, 20), timeout=15)
        queued_before_stop = set(ledger.queued)
        cluster.stop_pg(stop_signal)
        down_at = len(ledger.statuses)

        # While the database is away: pushes go to the spool, health says 503.
        await asyncio.sleep(1.0)
        r = await client.get("/health")
        assert r.status_code == 503
        assert r.json()["status"] == "unhealthy" and r.json()["database"] == "disconnected"
        assert r.headers["retry-after"] == "2"
        r = await _push(client, [{"queue": queue_name, "partition": "down", "transactionId":
                                  "down-1", "payload": 1}])
        assert r.status_code == 201 and r.json()[0]["status"] == "buffered", r.text
        r = await client.get("/api/v1/system/maintenance")
        assert r.status_code == 200 and r.json()["bufferedMessages"] >= 1
        assert r.json()["maintenanceMode"] is False  # the switch was not touched
        assert len(ledger.statuses) > down_at, "producers kept getting answers during the outage"
        assert ledger.buffered, "pushes during the outage were spooled"
        # The metrics still answer, from what the worker knows, and say the database is away.
        r = await client.get("/metrics/prometheus")
        assert r.status_code == 200
        assert "\nqueen_file_buffer_db_healthy 0.0\n" in r.text
        assert "queen_cluster_push_requests_total" not in r.text  # absent, not zero
        assert "queen_process_resident_memory_bytes{" in r.text
        r = await client.get("/metrics")
        assert r.status_code == 200 and r.json()["database"]["healthy"] is False
        assert r.json()["requests"]["total"] is None

        cluster.start_pg()
        recovery = await _wait_until_push_succeeds(client, queue_name, timeout=10)
        await wait_for(_at_least(ledger, len(ledger.queued) + 20), timeout=15)
    finally:
        stop.set()
        await asyncio.gather(*producers)

    assert recovery <= 10
    r = await client.get("/health")
    assert r.status_code == 200 and r.json()["database"] == "connected"
    # The errors the workers met are counted once their counters reach the database again.
    r = await client.get("/metrics/prometheus")
    assert "\nqueen_file_buffer_db_healthy 1.0\n" in r.text
    [errors] = [line for line in r.text.splitlines()
                if line.startswith("queen_cluster_db_errors_total ")]
    assert float(errors.split()[1]) > 0
    assert 500 not in ledger.statuses
    assert set(ledger.statuses) <= {201, 503}, set(ledger.statuses)
    # A 503 is still possible (e.g. a request in flight when the server died), with
    # Retry-After; a per-item `failed` names its error.
    assert all(status == 503 and ra is not None for status, _, ra in ledger.errors)
    assert all(e["status"] == "failed" and e["error"] for e in ledger.other_failed)

    # Every push answered `queued` or `buffered` is stored, exactly once per offset, offsets
    # gap-free, in the order its producer was answered (one producer per partition).
    stored: dict[str, int] = {}
    for k in range(4):
        entry = await fetch_records(client, queue_name, f"p{k}")
        offsets = [rec["offset"] for rec in entry["records"]]
        assert offsets == list(range(len(offsets)))
        for rec in entry["records"]:
            assert rec["transactionId"] not in stored
            stored[rec["transactionId"]] = rec["offset"]
        answered = ledger.answered.get(f"p{k}", [])
        assert [stored[t] for t in answered] == sorted(stored[t] for t in answered)
    missing = (ledger.queued | ledger.buffered) - set(stored)
    assert not missing, f"acknowledged pushes lost: {sorted(missing)[:5]}"
    assert queued_before_stop <= set(stored)
    assert "down-1" in {rec["transactionId"] for rec in
                        (await fetch_records(client, queue_name, "down"))["records"]}


async def test_health_is_200_when_the_database_answers(client: httpx.AsyncClient) -> None:
    r = await client.get("/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "healthy" and body["database"] == "connected"
    assert isinstance(body["version"], str)


async def test_broker_started_while_the_database_is_down_serves_once_it_arrives(
        cluster: Cluster, client: httpx.AsyncClient, queue_name: str) -> None:
    cluster.stop_broker()
    cluster.stop_pg(signal.SIGINT)
    assert cluster.pg is not None
    # Start-up waits for the database (connect_with_retry) instead of exiting.
    broker = BrokerProcess(cluster.pg.dsn, workers=1, port=cluster.port).start(wait=False)
    try:
        await asyncio.sleep(1.0)
        assert broker.web is not None and broker.web.poll() is None
        cluster.start_pg()
        broker.wait_healthy(30)
        async with httpx.AsyncClient(base_url=broker.url, timeout=30) as c:
            r = await _push(c, [{"queue": queue_name, "payload": "late"}])
            assert r.status_code == 201 and r.json()[0]["status"] == "queued"
    finally:
        broker.stop()
