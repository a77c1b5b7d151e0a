"""A PostgreSQL outage that the official client (`queen-mq` 2.6, unchanged) rides through.

The client's consume loop retries a failed pop three times (1 s, then 2 s)
and then keeps polling only if the error text contains "timeout" or "connection"; anything
else stops the consumer. So during an outage a parked long poll keeps waiting (and answers
messages when the database is back, or 204 at its deadline); a producer's pushes are taken by
the push spool (`buffered`, wire-protocol §11), and a 503 it may still get (a request in
flight when the server died) says "connection" and carries Retry-After.

The module runs its own PostgreSQL (synchronous_commit on, so an acknowledged push survives
kill -9 of the server) and a 2-worker broker with the reaper, and stops and restarts that
PostgreSQL on the same data directory.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from queen import Queen

from core import segments
from core.embedded import EmbeddedPostgres, stop_process
from tests.support import BrokerProcess, restart_embedded, server_data_dir, wait_for

OUTAGE_SECONDS = 10.0


class Server:
    """This module's PostgreSQL: killed and started again on the same data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.pg: EmbeddedPostgres | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.pg, self.proc = restart_embedded(self.data_dir, synchronous_commit="on")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def ensure_running(self) -> None:
        if self.proc is None:
            self.start()

    @property
    def dsn(self) -> str:
        assert self.pg is not None
        return self.pg.dsn


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with server_data_dir("queen-outage-") as data:
        s = Server(data)
        s.start()
        try:
            yield s
        finally:
            if s.proc is not None:
                stop_process(s.proc, signal.SIGINT)


@pytest.fixture(scope="module")
def broker_on_server(server: Server) -> Iterator[BrokerProcess]:
    with BrokerProcess(server.dsn, workers=2, reaper=True) as proc:
        yield proc


@pytest.fixture
async def client(server: Server, broker_on_server: BrokerProcess
                 ) -> AsyncIterator[httpx.AsyncClient]:
    server.ensure_running()
    broker_on_server.wait_healthy(30)
    async with httpx.AsyncClient(base_url=broker_on_server.url, timeout=30) as c:
        yield c


async def _outage(server: Server, seconds: float) -> None:
    server.kill()
    await asyncio.sleep(seconds)
    await asyncio.to_thread(server.start)


async def test_official_consumer_rides_through_a_10_s_outage_and_loses_nothing(
        server: Server, broker_on_server: BrokerProcess, client: httpx.AsyncClient,
        queue_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    # A short lease, so a batch whose ack met the outage comes back soon.
    r = await client.post("/api/v1/configure",
                          json={"queue": queue_name, "options": {"leaseTime": 3}})
    assert r.status_code == 200
    # Group "g" long-polls (the default); group "g2" polls without waiting, so its pops meet
    # the outage as 503s and survive by the client's own "connection" rule.
    handled: Counter[str] = Counter()
    handled_nowait: Counter[str] = Counter()
    queued: set[str] = set()  # answered `queued` or `buffered`: either is a promise
    buffered: set[str] = set()
    push_failures: list[BaseException] = []
    stop_producing = asyncio.Event()
    stop_consuming = asyncio.Event()

    async def handler(messages: list[dict[str, Any]]) -> None:
        for message in messages:
            handled[message["transactionId"]] += 1

    async def handler_nowait(messages: list[dict[str, Any]]) -> None:
        for message in messages:
            handled_nowait[message["transactionId"]] += 1

    async def producer(queen: Queen) -> None:
        n = 0
        while not stop_producing.is_set():
            txid = f"m{n}"
            n += 1
            try:
                answer = await queen.queue(queue_name).partition(f"p{n % 4}").push(
                    [{"data": {"n": n}, "transactionId": txid}])
            except Exception as exc:  # noqa: BLE001 - every failure is recorded and checked
                push_failures.append(exc)
                continue
            if answer[0]["status"] in ("queued", "buffered"):
                queued.add(txid)
                if answer[0]["status"] == "buffered":
                    buffered.add(txid)
            await asyncio.sleep(0.05)

    async with Queen(broker_on_server.url) as queen:
        consumers = [
            asyncio.ensure_future(
                queen.queue(queue_name).group("g").batch(10).concurrency(2).timeout_millis(2000)
                .consume(handler, signal=stop_consuming)),
            asyncio.ensure_future(
                queen.queue(queue_name).group("g2").batch(10).wait(False)
                .consume(handler_nowait, signal=stop_consuming))]
        producing = asyncio.create_task(producer(queen))
        try:
            await wait_for(lambda: _handled_some(handled, 20), timeout=20)
            await _outage(server, OUTAGE_SECONDS)
            _check_running(consumers)
            await asyncio.sleep(3)  # producing again
            stop_producing.set()
            await producing
            assert queued, "the producer got through before and after the outage"
            for counts, group in ((handled, "g"), (handled_nowait, "g2")):
                await wait_for(lambda c=counts: _handled_all(c, queued), timeout=60)
                await wait_for(lambda g=group: _all_acked(server.dsn, queue_name, g), timeout=30)
            _check_running(consumers)
        finally:
            stop_producing.set()
            stop_consuming.set()
            await asyncio.wait_for(asyncio.gather(producing, *consumers, return_exceptions=True),
                                   30)
    for consumer in consumers:
        consumer.result()  # it ended because we asked it to, not with an error
    # The non-waiting consumer met the outage and kept polling by the client's own rule
    # (it prints this line when it does).
    assert "Network error - The database connection is unavailable" in capsys.readouterr().out

    # The producer met the outage, and the push spool took its pushes: the official client
    # returns the `buffered` answers as they are (no exception, no error callback). A push
    # in flight when the server died may still meet a clear, retryable 503.
    assert buffered, "some pushes met the outage and were spooled"
    for failure in push_failures:
        assert isinstance(failure, httpx.HTTPStatusError), repr(failure)
        assert failure.response.status_code == 503
        assert failure.response.headers["retry-after"].isdigit()
        assert "connection" in str(failure)
    # Nothing the producer was told was queued or buffered is lost: stored and handled at
    # least once.
    stored = await _stored_txids(server.dsn, queue_name)
    assert queued <= stored
    assert queued <= set(handled) and queued <= set(handled_nowait)


def _check_running(consumers: list[asyncio.Future[Any]]) -> None:
    for consumer in consumers:
        assert not consumer.done(), f"a consumer stopped: {consumer.exception()!r}"


async def _handled_some(handled: Counter[str], count: int) -> bool:
    return len(handled) >= count


async def _handled_all(handled: Counter[str], queued: set[str]) -> bool:
    return queued <= set(handled)


async def _all_acked(dsn: str, queue: str, group: str) -> bool:
    """Every partition of the queue has the group's cursor at its last offset, unleased."""
    conn = await asyncpg.connect(dsn)
    try:
        behind = await conn.fetchval(
            """SELECT count(*) FROM queen.log_partitions p
                 JOIN queen.queues q ON q.id = p.queue_id
                 LEFT JOIN queen.log_consumers c
                        ON c.partition_id = p.id AND c.consumer_group = $2
                WHERE q.name = $1
                  AND (c.committed IS DISTINCT FROM p.last_offset OR c.worker_id IS NOT NULL)""",
            queue, group)
    finally:
        await conn.close()
    return int(behind) == 0


async def _stored_txids(dsn: str, queue: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        # The stored messages themselves (the index keeps only a key of each transactionId).
        rows = await conn.fetch(
            """SELECT s.blob FROM queen.log_segments s
                 JOIN queen.log_partitions p ON p.id = s.partition_id
                 JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1""", queue)
    finally:
        await conn.close()
    return {f.transaction_id for r in rows for f in segments.unpack(r["blob"])}


async def test_parked_long_polls_wait_out_an_outage_and_answer_204_or_messages(
        server: Server, client: httpx.AsyncClient, queue_name: str) -> None:
    r = await client.post("/api/v1/configure", json={"queue": queue_name, "options": {}})
    assert r.status_code == 200
    path = f"/api/v1/pop/queue/{queue_name}"
    long = asyncio.create_task(client.get(path, params={"wait": "true", "timeout": "20000"}))
    short = asyncio.create_task(client.get(path, params={"wait": "true", "timeout": "3000"}))
    await asyncio.sleep(0.5)
    server.kill()
    try:
        # A pop that does not wait cannot ride it out: a clear 503 the client's rule retries.
        r = await client.get(path, params={"wait": "false"})
        assert r.status_code == 503
        assert "connection" in r.json()["error"] and r.headers["retry-after"].isdigit()
        # The short poll reaches its deadline inside the outage: nothing, not an error.
        answer = await asyncio.wait_for(short, 10)
        assert answer.status_code == 204 and answer.content == b""
        assert not long.done()
    finally:
        await asyncio.to_thread(server.start)
    started = time.monotonic()
    while True:  # the first pushes after the restart may still meet the outage
        r = await client.post("/api/v1/push", json={"items": [
            {"queue": queue_name, "transactionId": "back", "payload": "back"}]})
        if r.status_code == 201:
            break
        assert r.status_code == 503, r.text
        assert time.monotonic() - started < 10, "no push went through after the restart"
        await asyncio.sleep(0.2)
    answer = await asyncio.wait_for(long, 10)
    assert answer.status_code == 200, answer.text
    assert [m["transactionId"] for m in answer.json()["messages"]] == ["back"]
