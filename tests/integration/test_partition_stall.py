"""One partition whose writes cannot go through must not hold back the others.

A push whose write to one partition stalls past PUSH_ANSWER_TIMEOUT_MS (its partition row is
locked by a transaction that does not end: an operator's session left open, a stuck
migration) is answered as an outage. While the database itself answers, that outage is the
partition's alone: the push is answered 503 with Retry-After (nothing acknowledged, the
client retries it, a dedup duplicate if the stalled write commits meanwhile), and pushes to
other partitions are written and delivered as before. Only a database that does not answer,
or whose commits stall everywhere, sends pushes to the push spool (test_outage_and_restart.py),
whose drain replays in order, so a spooled push to the stalled partition would hold every
push after it behind that lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from core.embedded import stop_process
from tests.support import BrokerProcess, create_database, server_data_dir, start_embedded

ANSWER_TIMEOUT_MS = 1500


@pytest.fixture
def stall_broker(own_database: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    env = {"PUSH_ANSWER_TIMEOUT_MS": str(ANSWER_TIMEOUT_MS),
           "FILE_BUFFER_DIR": str(tmp_path / "spool")}
    with BrokerProcess(own_database, workers=1, env=env) as proc:
        yield proc


@pytest.fixture
async def client(stall_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stall_broker.url, timeout=30) as c:
        yield c


async def _push(client: httpx.AsyncClient, queue: str, txid: str) -> httpx.Response:
    return await client.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": "p", "transactionId": txid, "payload": {"t": txid}}]})


@contextlib.asynccontextmanager
async def _locked(url: str, queue: str) -> AsyncIterator[None]:
    """Partition `p` of `queue` locked by a transaction held open for the block, as by a
    session nobody ends."""
    holder = await asyncpg.connect(url)
    locked = holder.transaction()
    await locked.start()
    try:
        await holder.execute(
            "SELECT 1 FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id"
            " WHERE q.name = $1 AND p.name = 'p' FOR UPDATE", queue)
        yield
    finally:
        await locked.rollback()
        await holder.close()


async def _pop_all(client: httpx.AsyncClient, queue: str) -> list[str]:
    r = await client.get(f"/api/v1/pop/queue/{queue}",
                         params={"batch": "10", "wait": "false", "autoAck": "true"})
    assert r.status_code in (200, 204), r.text
    return [] if r.status_code == 204 else [m["transactionId"] for m in r.json()["messages"]]


async def test_a_stalled_partition_answers_503_and_the_others_go_on(
        client: httpx.AsyncClient, own_database: str) -> None:
    stuck, free = "stuck-q", "free-q"
    for queue in (stuck, free):  # both partitions exist before the lock
        r = await _push(client, queue, f"{queue}-0")
        assert r.status_code == 201 and r.json()[0]["status"] == "queued", r.text
        assert await _pop_all(client, queue) == [f"{queue}-0"]
    async with _locked(own_database, stuck):
        started = time.monotonic()
        r = await _push(client, stuck, "stuck-1")
        took = time.monotonic() - started
        # Not acknowledged (before: 201 `buffered`, so the spool held every later push).
        assert r.status_code == 503, r.text
        assert r.headers.get("Retry-After"), r.headers
        assert took < ANSWER_TIMEOUT_MS / 1000 + 3, took
        # The other partition is written and delivered while the lock is held.
        for i in (1, 2):
            r = await _push(client, free, f"{free}-{i}")
            assert r.status_code == 201 and r.json()[0]["status"] == "queued", r.text
        assert await _pop_all(client, free) == [f"{free}-1", f"{free}-2"]
    # The client's retry after the lock: stored once, whether or not the stalled write
    # committed when the lock went.
    r = await _push(client, stuck, "stuck-1")
    assert r.status_code == 201 and r.json()[0]["status"] in ("queued", "duplicate"), r.text
    await asyncio.sleep(0.2)
    assert await _pop_all(client, stuck) == ["stuck-1"]
    assert await _pop_all(client, stuck) == []


async def test_commits_that_stall_everywhere_still_go_to_the_spool(tmp_path: Path) -> None:
    """A server that answers reads while no commit completes (here: a synchronous standby
    that does not exist, as after losing the only one; a stalled disk looks the same) is
    down for writes as a whole: the push is spooled (`buffered`) rather than refused, and
    stored once when commits complete again. (A read-only ping answered; a commit probe
    does not.)"""
    with server_data_dir("queen-stall-") as data:
        pg, proc = start_embedded(Path(data), synchronous_commit="on")
        try:
            url = await create_database(pg.dsn)
            env = {"PUSH_ANSWER_TIMEOUT_MS": str(ANSWER_TIMEOUT_MS),
                   "FILE_BUFFER_DIR": str(tmp_path / "spool")}
            admin = await asyncpg.connect(pg.dsn)
            try:
                with BrokerProcess(url, workers=1, env=env) as broker:
                    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as client:
                        r = await _push(client, "sync-q", "s-0")
                        assert r.status_code == 201 and r.json()[0]["status"] == "queued"
                        await admin.execute(
                            "ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
                        await admin.execute("SELECT pg_reload_conf()")
                        await asyncio.sleep(0.5)
                        r = await _push(client, "sync-q", "s-1")
                        # Before: 503 (the read-only ping answered).
                        assert r.status_code == 201, r.text
                        assert r.json()[0]["status"] == "buffered", r.text
                        await admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
                        await admin.execute("SELECT pg_reload_conf()")
                        got: list[str] = []
                        deadline = time.monotonic() + 20
                        while len(got) < 2 and time.monotonic() < deadline:
                            got += await _pop_all(client, "sync-q")
                            await asyncio.sleep(0.2)
                        assert got == ["s-0", "s-1"]
                        await asyncio.sleep(0.5)
                        assert await _pop_all(client, "sync-q") == []
            finally:
                await admin.close()
        finally:
            stop_process(proc, signal.SIGINT)


async def _commit_probes(client: httpx.AsyncClient) -> int:
    r = await client.get("/metrics/prometheus")
    assert r.status_code == 200, r.text
    return int(next(float(line.split()[-1]) for line in r.text.splitlines()
                    if line.startswith("queen_cluster_commit_probes_total ")))


async def test_pushes_stalled_together_share_one_commit_probe(
        client: httpx.AsyncClient, own_database: str) -> None:
    """Each push that fails as an outage asks whether the database still commits, with a
    write of its own. Producers retrying into a stalled partition must not turn into as
    many probe commits (each a WAL flush on the primary): the pushes failing together share
    one probe, and its answer serves for a moment. Before, 40 stalled pushes made 40."""
    stuck = "probe-q"
    r = await _push(client, stuck, "p-0")
    assert r.status_code == 201, r.text
    before = await _commit_probes(client)
    async with _locked(own_database, stuck):
        answers = await asyncio.gather(*(_push(client, stuck, f"p-{i}") for i in range(1, 41)))
        assert {a.status_code for a in answers} == {503}
    assert await _commit_probes(client) - before <= 2  # one a second at most
