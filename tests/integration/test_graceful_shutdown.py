"""A stop (SIGTERM) loses nothing: in-flight pushes commit and are answered, parked long polls
answer 204 at once, and the web process exits within a bound.

The web tier runs as `queen-broker web` (the supervisor and its workers) on the session's
database; the session's broker reads back what was stored after the stopped one is gone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.served import Served, eventually, fresh_connections
from tests.support import fetch_records

EXIT_WITHIN = 10.0  # seconds from SIGTERM (or from the database letting go) to exit


@pytest.fixture
def web(database_url: str, tmp_path: Path) -> Iterator[Served]:
    with Served(tmp_path / "web.log", command="web", workers=2,
                env={"DATABASE_URL": database_url}) as s:
        yield s


@pytest.fixture
async def fresh(web: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with fresh_connections(web.url) as client:
        yield client


def _item(queue: str, partition: str, txid: str) -> dict[str, object]:
    return {"queue": queue, "partition": partition, "transactionId": txid, "payload": txid}


async def _stored(http: httpx.AsyncClient, queue: str, partition: str) -> list[str]:
    return [r["transactionId"] for r in (await fetch_records(http, queue, partition))["records"]]


async def test_pushes_held_in_flight_at_sigterm_still_commit_and_are_answered(
        web: Served, fresh: httpx.AsyncClient, http: httpx.AsyncClient, database_url: str,
        queue_name: str) -> None:
    r = await fresh.post("/api/v1/push", json={"items": [_item(queue_name, "held", "first")]})
    assert r.status_code == 201
    # Hold the partition's row lock, so every flush of it waits in the database.
    conn = await asyncpg.connect(database_url)
    try:
        lock = conn.transaction()
        await lock.start()
        await conn.execute(
            "SELECT 1 FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id"
            " WHERE q.name = $1 AND p.name = 'held' FOR UPDATE", queue_name)
        pushes = [asyncio.create_task(fresh.post("/api/v1/push", json={"items": [
            _item(queue_name, "held", f"t{n}")]})) for n in range(20)]
        await asyncio.sleep(1.0)
        assert not any(p.done() for p in pushes)
        assert web.proc is not None
        web.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(1.5)
        # Draining: nothing was cut off, and the process waits for its pushes.
        assert not any(p.done() for p in pushes)
        assert web.proc.poll() is None
        await lock.rollback()
        released = time.monotonic()
    finally:
        await conn.close()
    answers = await asyncio.wait_for(asyncio.gather(*pushes), 10)
    assert [a.status_code for a in answers] == [201] * 20
    assert [a.json()[0]["status"] for a in answers] == ["queued"] * 20
    await eventually(lambda: web.proc is None or web.proc.poll() is not None, EXIT_WITHIN)
    assert web.stop() == 0
    assert time.monotonic() - released < EXIT_WITHIN
    assert sorted(await _stored(http, queue_name, "held")) == \
        sorted(["first"] + [f"t{n}" for n in range(20)])


async def test_pushes_under_load_during_sigterm_are_answered_or_refused_never_lost(
        web: Served, fresh: httpx.AsyncClient, http: httpx.AsyncClient,
        queue_name: str) -> None:
    queued: set[str] = set()
    statuses: list[int] = []
    refused: list[str] = []  # the connection was refused: retryable, nothing was written
    # Sent, then the connection was reset without an answer: a connection still in the
    # kernel's queue when the last worker closed the socket. Retryable, if nothing was written.
    broken: list[str] = []
    after_sigterm = 0
    sigterm_at: float | None = None

    async def producer(k: int) -> None:
        nonlocal after_sigterm
        n = 0
        while web.proc is not None and web.proc.poll() is None:
            txid = f"k{k}-{n}"
            n += 1
            try:
                r = await fresh.post("/api/v1/push",
                                     json={"items": [_item(queue_name, f"p{k % 4}", txid)]})
            except httpx.ConnectError:
                refused.append(txid)
                await asyncio.sleep(0.01)
                continue
            except httpx.TransportError:
                broken.append(txid)
                continue
            statuses.append(r.status_code)
            if sigterm_at is not None:
                after_sigterm += 1
            if r.status_code == 201 and r.json()[0]["status"] == "queued":
                queued.add(txid)

    producers = [asyncio.create_task(producer(k)) for k in range(16)]
    await eventually(lambda: len(queued) >= 100, 20)
    assert web.proc is not None
    web.proc.send_signal(signal.SIGTERM)
    sigterm_at = time.monotonic()
    await asyncio.wait_for(asyncio.gather(*producers), EXIT_WITHIN + 5)
    assert time.monotonic() - sigterm_at < EXIT_WITHIN
    assert web.stop() == 0

    assert set(statuses) <= {201, 503}, statuses  # never a 500
    stored = {t for p in range(4) for t in await _stored(http, queue_name, f"p{p}")}
    assert queued <= stored, f"acknowledged and lost: {sorted(queued - stored)[:5]}"
    # Nothing without an answer was written: no worker had accepted those requests.
    assert not set(refused) & stored
    assert not set(broken) & stored, sorted(set(broken) & stored)
    assert after_sigterm > 0, "some pushes were answered while the workers drained"


async def test_parked_long_polls_answer_204_at_once_on_sigterm(
        web: Served, queue_name: str) -> None:
    # Each pop on its own connection, parked for up to 30 s on an empty queue.
    async with httpx.AsyncClient(base_url=web.url, timeout=40) as client:
        await client.post("/api/v1/configure", json={"queue": queue_name, "options": {}})
        polls = [asyncio.create_task(client.get(
            f"/api/v1/pop/queue/{queue_name}", params={"wait": "true", "timeout": "30000"}))
            for _ in range(10)]
        await asyncio.sleep(1.0)
        assert not any(p.done() for p in polls)
        assert web.proc is not None
        web.proc.send_signal(signal.SIGTERM)
        sigterm_at = time.monotonic()
        answers = await asyncio.wait_for(asyncio.gather(*polls), 5)
        answered_after = time.monotonic() - sigterm_at
    assert [a.status_code for a in answers] == [204] * 10
    assert all(a.content == b"" for a in answers)
    assert answered_after < 3.0, f"parked polls answered {answered_after:.1f} s after SIGTERM"
    await eventually(lambda: web.proc is None or web.proc.poll() is not None, EXIT_WITHIN)
    assert web.stop() == 0


async def test_one_worker_stopped_alone_drains_while_the_other_serves_and_is_replaced(
        web: Served, fresh: httpx.AsyncClient, queue_name: str) -> None:
    victim, survivor = web.children("web")
    statuses: list[int] = []
    stop = asyncio.Event()

    async def producer(k: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            r = await fresh.post("/api/v1/push",
                                 json={"items": [_item(queue_name, "p", f"k{k}-{n}")]})
            statuses.append(r.status_code)

    producers = [asyncio.create_task(producer(k)) for k in range(4)]
    try:
        await eventually(lambda: len(statuses) >= 20, 20)
        os.kill(victim, signal.SIGTERM)
        await eventually(lambda: (w := web.children("web")) and len(w) == 2
                         and victim not in w, 20)
        before = len(statuses)
        await eventually(lambda: len(statuses) >= before + 20, 20)
    finally:
        stop.set()
        await asyncio.gather(*producers)
    # The stopping worker closed only its own copy of the shared socket: no request failed.
    assert set(statuses) == {201}
    assert survivor in web.children("web")
    assert f"(pid {victim} exited with code 0) after" in web.log()


async def test_a_connection_accepted_just_before_sigterm_still_gets_its_request_answered(
        web: Served) -> None:
    """A client that connected just before the stop and sends its request a moment later is
    answered (ACCEPT_GRACE runs from the accept: broker/worker.py), with Connection: close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", web.port)
    try:
        await asyncio.sleep(0.1)  # accepted by an idle worker meanwhile
        assert web.proc is not None
        web.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.2)  # the workers are draining now
        writer.write(b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"connection: close" in head.lower(), head
    await eventually(lambda: web.proc is None or web.proc.poll() is not None, EXIT_WITHIN)
    assert web.stop() == 0
