"""Maintenance and the push spool under `queen-broker serve` with 2 web workers (real
processes, on a database of this module's own).

Promises: a switch turned on at one worker reaches every worker by NOTIFY (each logs it);
and the fault case: maintenance on, producers pushing, kill -9 of a web worker
in the middle of it, maintenance off, kill -9 of the worker draining the spool: every push
answered `buffered` or `queued` is stored exactly once, in the order its producer was
answered, and the supervisor's replacement workers take part as if nothing happened.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from core.engine.spool import DRAIN_LOCK
from tests.served import Served, eventually, fresh_connections
from tests.support import create_database, fetch_records, wait_for

MAINTENANCE = "/api/v1/system/maintenance"


@pytest.fixture(scope="module")
async def own_database(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def served(own_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    spool = tmp_path_factory.mktemp("spool")
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    # Small replay batches, so draining takes long enough to kill the drainer in the act.
    with Served(log, env={"DATABASE_URL": own_database, "FILE_BUFFER_DIR": str(spool),
                          "FILE_BUFFER_MAX_BATCH": "2", "FILE_BUFFER_FLUSH_MS": "50"}) as s:
        yield s


def _switch_logged(served: Served, pid: int, text: str) -> bool:
    return any(f" {pid} INFO core.admin.switches: maintenance: {text}" in line
               for line in served.log().splitlines())


async def test_every_worker_follows_a_switch_made_at_one_of_them(served: Served) -> None:
    workers = served.children("web")
    assert len(workers) == 2
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        assert (await client.post(MAINTENANCE, json={"enabled": True})).status_code == 200
        await eventually(lambda: all(_switch_logged(served, pid, "pushes to the spool")
                                     for pid in workers), timeout=3)
        assert (await client.post(MAINTENANCE, json={"enabled": False})).status_code == 200
        await eventually(lambda: all(_switch_logged(served, pid, "pushes to the database")
                                     for pid in workers), timeout=3)


def _drainer(served: Served) -> int | None:
    for pid in served.children("web"):
        try:
            if any(f.path.endswith(DRAIN_LOCK) for f in psutil.Process(pid).open_files()):
                return pid
        except psutil.Error:
            continue
    return None


async def _producer(url: str, queue: str, name: str, answered: list[str],
                    stop: asyncio.Event) -> None:
    """Sequential pushes to its own partition over fresh connections (so they spread over
    the workers), each re-sent with the same transactionId until it is answered."""
    n = 0
    async with fresh_connections(url) as client:
        while not stop.is_set():
            txid = f"{name}-{n}"
            while True:
                try:
                    r = await client.post("/api/v1/push", json={"items": [
                        {"queue": queue, "partition": name, "transactionId": txid,
                         "payload": {"n": n}}]})
                except httpx.TransportError:  # its worker was killed: send it again
                    await asyncio.sleep(0.05)
                    continue
                assert r.status_code in (201, 503), r.text
                if r.status_code == 201:
                    assert r.json()[0]["status"] in ("queued", "buffered", "duplicate"), r.text
                    break
                await asyncio.sleep(0.1)
            answered.append(txid)
            n += 1
            await asyncio.sleep(0.01)


async def test_kill_9_of_workers_while_spooling_and_draining_loses_nothing(
        served: Served, queue_name: str) -> None:
    answered: dict[str, list[str]] = {f"p{k}": [] for k in range(3)}
    stop = asyncio.Event()
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        assert (await client.post(MAINTENANCE, json={"enabled": True})).status_code == 200
        await asyncio.sleep(0.3)  # the other worker hears of it
        producers = [asyncio.create_task(_producer(served.url, queue_name, p, answered[p], stop))
                     for p in answered]
        try:
            await wait_for(lambda: asyncio.sleep(0, sum(map(len, answered.values())) >= 60), 20)
            victim = served.children("web")[0]
            os.kill(victim, signal.SIGKILL)  # maybe in the middle of a spool write
            await eventually(lambda: victim not in served.children("web")
                             and len(served.children("web")) == 2, timeout=20)
            await wait_for(lambda: asyncio.sleep(0, sum(map(len, answered.values())) >= 150), 30)
        finally:
            stop.set()
            await asyncio.gather(*producers)
        total = sum(map(len, answered.values()))
        status = (await client.get(MAINTENANCE)).json()
        # Everything went to the spool; a push whose answer the kill cut off was sent again
        # and spooled twice (its replay is a duplicate), so there may be more records.
        assert status["bufferedMessages"] >= total, status
        assert await _stored(client, queue_name) == {}

        assert (await client.post(MAINTENANCE, json={"enabled": False})).status_code == 200
        drainer = await eventually(lambda: _drainer(served), timeout=10, interval=0.01)
        os.kill(drainer, signal.SIGKILL)  # in the middle of a replay
        await eventually(lambda: drainer not in served.children("web")
                         and len(served.children("web")) == 2, timeout=20)

        async def drained() -> bool:
            return bool((await client.get(MAINTENANCE)).json()["bufferedMessages"] == 0)

        await wait_for(drained, timeout=60, interval=0.2)
        stored = await _stored(client, queue_name)
    for partition, txids in answered.items():
        assert stored.get(partition, []) == txids, partition  # all, once, in answer order


async def _stored(client: httpx.AsyncClient, queue: str) -> dict[str, list[str]]:
    out = {}
    for k in range(3):
        records = (await fetch_records(client, queue, f"p{k}"))["records"]
        if records:
            out[f"p{k}"] = [r["transactionId"] for r in records]
    return out


def test_the_spool_directory_is_the_configured_one(served: Served) -> None:
    spool = Path(served.env["FILE_BUFFER_DIR"])
    assert list(spool.glob("*/*.spool")), "the spool lives under FILE_BUFFER_DIR/<instance>"
