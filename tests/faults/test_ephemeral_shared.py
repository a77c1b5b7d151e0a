"""Ephemeral queues shared by two brokers (two `serve` process trees, 2 web workers each) over
one PostgreSQL of this module's own, and the restart contract of docs/guide/ephemeral.md
("What survives what"): a clean stop of the brokers, kill -9 of a worker and a clean restart of
PostgreSQL keep declarations and contents (old ids still ack); a crash or immediate stop of
PostgreSQL (which empties UNLOGGED tables) keeps declarations, loses contents and changes
the epoch, so old ids ack `stale`."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from core.embedded import EmbeddedPostgres, stop_process
from tests.served import Served, eventually, fresh_connections
from tests.support import create_database, restart_embedded, server_data_dir

EPH = "/api/v1/ephemeral"


class Pair:
    """One PostgreSQL and two brokers on one database in it."""

    def __init__(self, data: Path, logs: Path) -> None:
        self.data, self.logs = data, logs
        self.pg: EmbeddedPostgres | None = None
        self.pg_proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.brokers: list[Served] = []

    def start_pg(self) -> None:
        # synchronous_commit on: a declaration the broker acknowledged must survive a crash
        # of the server process, as in production (the suite's default turns it off).
        self.pg, self.pg_proc = restart_embedded(self.data, synchronous_commit="on")

    def stop_pg(self, sig: int) -> None:
        assert self.pg_proc is not None
        if sig == signal.SIGKILL:
            self.pg_proc.kill()
            self.pg_proc.wait()
        else:
            stop_process(self.pg_proc, sig)
        self.pg_proc = None

    def start_brokers(self) -> None:
        # Side by side: the suite waits for one start instead of two.
        self.brokers = [Served(self.logs / f"serve-{i}.log",
                               env={"DATABASE_URL": self.url}).start(wait=False)
                        for i in (0, 1)]
        for b in self.brokers:
            b.wait_healthy(60)

    def stop_brokers(self) -> None:
        with ThreadPoolExecutor(2) as both:
            list(both.map(Served.stop, self.brokers))
        self.brokers = []

    @property
    def a(self) -> str:
        return self.brokers[0].url

    @property
    def b(self) -> str:
        return self.brokers[1].url


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with server_data_dir("queen-eph-") as data:
        p = Pair(data, tmp_path_factory.mktemp("eph-serve"))
        try:
            p.start_pg()
            assert p.pg is not None
            p.url = asyncio.run(create_database(p.pg.dsn))
            p.start_brokers()
            yield p
        finally:
            p.stop_brokers()
            if p.pg_proc is not None:
                stop_process(p.pg_proc, signal.SIGINT)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with fresh_connections("http://unused", timeout=40) as c:
        yield c


async def _call(http: httpx.AsyncClient, method: str, url: str, **kw: Any) -> Any:
    """The call's JSON, retried while the broker answers 503 (the database coming back)."""
    for _ in range(150):
        try:
            r = await http.request(method, url, **kw)
        except httpx.TransportError:
            await asyncio.sleep(0.2)
            continue
        if r.status_code != 503:
            assert r.status_code < 300, r.text
            return r.json()
        await asyncio.sleep(0.2)
    raise AssertionError(f"{method} {url} kept answering 503")


async def _push(http: httpx.AsyncClient, base: str, q: str, payloads: list[Any]) -> None:
    await _call(http, "POST", base + EPH + "/push",
                json={"queue": q, "messages": [{"payload": p} for p in payloads]})


async def _pop(http: httpx.AsyncClient, base: str, q: str, **params: Any) -> list[Any]:
    answer = await _call(http, "GET", base + EPH + "/pop", params={"queue": q, **params})
    messages: list[Any] = answer["messages"]
    return messages


async def _ack(http: httpx.AsyncClient, base: str, q: str, ids: list[str],
               **extra: Any) -> list[str]:
    answer = await _call(http, "POST", base + EPH + "/ack",
                         json={"queue": q, "acks": [{"id": i, **extra} for i in ids]})
    return [r["outcome"] for r in answer["results"]]


async def _depth(http: httpx.AsyncClient, base: str, q: str) -> Any:
    return await _call(http, "GET", base + EPH + f"/queues/{q}/depth")


def _queue() -> str:
    return "sh-" + uuid.uuid4().hex[:10]


async def _one_sweeper_sweeps(pair: Pair, http: httpx.AsyncClient) -> None:
    """A ttl queue nobody touches empties (some worker's sweep runs), and exactly one
    connection of the two brokers' workers holds the sweeper's lock (schema eph_sweeper_claim),
    the sweep's own connection."""
    q = _queue()
    await _call(http, "POST", pair.a + EPH + "/configure",
                json={"queue": q, "options": {"ttlSeconds": 1}})
    await _push(http, pair.a, q, ["t1", "t2"])
    for _ in range(100):  # listing the queues touches none of them
        listing = await _call(http, "GET", pair.b + EPH + "/queues")
        mine = next(x for x in listing["queues"] if x["queue"] == q)
        if mine["depth"] == 0 and mine["drops"]["ttl"] == 2:
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError(f"the sweep never dropped them: {mine}")
    conn = await asyncpg.connect(pair.url)
    try:
        holders = await conn.fetch(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.classid = 7431 AND l.objid = 20 "
            "AND l.granted")
    finally:
        await conn.close()
    assert [h["application_name"] for h in holders] == ["queen-broker-sweep"]


async def test_two_brokers_see_one_queue(pair: Pair, http: httpx.AsyncClient) -> None:
    await _one_sweeper_sweeps(pair, http)
    q = _queue()
    await _call(http, "POST", pair.a + EPH + "/configure",
                json={"queue": q, "options": {"leaseSeconds": 60}})
    await _push(http, pair.a, q, [1, 2, 3])
    got = await _pop(http, pair.b, q, batch=2)
    assert [m["payload"] for m in got] == [1, 2]
    assert await _ack(http, pair.a, q, [m["id"] for m in got]) == ["acked", "acked"]
    for base in (pair.a, pair.b):
        assert (await _depth(http, base, q))["pending"] == 1
    # competing pops through every worker of both brokers take each message once
    await _push(http, pair.b, q, list(range(4, 24)))
    seen = []
    for i in range(40):
        seen += [m["payload"] for m in await _pop(http, (pair.a, pair.b)[i % 2], q)]
    assert sorted(seen) == list(range(3, 24))


async def test_a_waiting_pop_on_one_broker_is_woken_by_the_other(
        pair: Pair, http: httpx.AsyncClient) -> None:
    q = _queue()
    waiting = asyncio.create_task(_pop(http, pair.b, q, wait="true", timeout=30_000))
    await asyncio.sleep(1.0)
    assert not waiting.done()
    await _push(http, pair.a, q, ["across"])
    got = await asyncio.wait_for(waiting, 15)  # liveness only: far below its 30 s deadline
    assert [m["payload"] for m in got] == ["across"]
    # a redelivery by a failed ack through A wakes a pop waiting on B
    lost = got[0]["id"]
    waiting = asyncio.create_task(_pop(http, pair.b, q, wait="true", timeout=30_000))
    await asyncio.sleep(1.0)
    assert await _ack(http, pair.a, q, [lost], status="failed") == ["redelivered"]
    again = await asyncio.wait_for(waiting, 15)
    assert [(m["payload"], m["attempts"]) for m in again] == [("across", 2)]


async def test_worker_kill_and_clean_broker_restart_keep_contents(
        pair: Pair, http: httpx.AsyncClient) -> None:
    declared, implicit = _queue(), _queue()
    await _call(http, "POST", pair.a + EPH + "/configure",
                json={"queue": declared, "options": {"leaseSeconds": 600, "maxLength": 77}})
    await _push(http, pair.a, declared, ["d1", "d2"])
    await _push(http, pair.a, implicit, ["i1"])
    leased = await _pop(http, pair.a, declared)
    victim = pair.brokers[0].children("web")[0]
    os.kill(victim, signal.SIGKILL)
    # the other broker serves at once; the killed worker's supervisor starts a new one
    assert [m["payload"] for m in await _pop(http, pair.b, implicit, autoAck="true")] == ["i1"]
    await eventually(lambda: victim not in pair.brokers[0].children("web")
                     and len(pair.brokers[0].children("web")) == 2, timeout=30)
    await _push(http, pair.b, implicit, ["i2"])
    pair.stop_brokers()
    pair.start_brokers()
    assert (await _depth(http, pair.a, declared))["pending"] == 1
    assert [m["payload"] for m in await _pop(http, pair.b, implicit)] == ["i2"]
    assert await _ack(http, pair.b, declared, [leased[0]["id"]]) == ["acked"]


@pytest.mark.parametrize("how", ["clean", "crash", "immediate"])
async def test_postgres_restart(pair: Pair, http: httpx.AsyncClient, how: str) -> None:
    declared, implicit = _queue(), _queue()
    await _call(http, "POST", pair.a + EPH + "/configure",
                json={"queue": declared, "options": {"leaseSeconds": 600, "maxLength": 77}})
    await _push(http, pair.a, declared, ["d1", "d2"])
    await _push(http, pair.b, implicit, ["i1"])
    [leased] = await _pop(http, pair.b, declared)
    pair.stop_pg({"clean": signal.SIGINT, "crash": signal.SIGKILL,
                  "immediate": signal.SIGQUIT}[how])
    if how == "crash":
        # Down longer than any sweep loop's pause (2 s at most): every worker's sweep meets
        # the outage (a failed connect), and one of them must come back sweeping.
        await asyncio.sleep(3)
    pair.start_pg()
    await _one_sweeper_sweeps(pair, http)  # the sweep outlived the restart, on one worker
    listing = await _call(http, "GET", pair.a + EPH + "/queues")
    mine = {q["queue"]: q for q in listing["queues"]}
    assert mine[declared]["tier"] == "declared"
    assert mine[declared]["options"]["maxLength"] == 77
    if how == "clean":
        # UNLOGGED tables survive a clean shutdown: everything is as it was
        assert mine[declared]["depth"] == 2 and mine[implicit]["depth"] == 1
        assert await _ack(http, pair.a, declared, [leased["id"]]) == ["acked"]
        return
    # crash recovery emptied the contents: the declaration stays, the rest is gone
    assert mine[declared]["depth"] == 0 and implicit not in mine
    assert await _ack(http, pair.a, declared, [leased["id"]]) == ["stale"]
    assert (await _depth(http, pair.b, declared))["pending"] == 0
    await _push(http, pair.a, declared, ["after"])
    [fresh] = await _pop(http, pair.b, declared)
    assert fresh["payload"] == "after"
    old_epoch, new_epoch = (int(i.split(":")[1], 16) for i in (leased["id"], fresh["id"]))
    assert new_epoch > old_epoch
    assert await _ack(http, pair.b, declared, [fresh["id"]]) == ["acked"]
