"""`queen-broker serve` keeps serving through the death of any one of its processes.

A dead web worker is replaced while the others keep serving, a dead reaper
is restarted, a dead embedded PostgreSQL is restarted on the same data directory (and the
workers' pools and LISTEN connections find it again), a process that keeps dying stops the
broker with its name and last exit status, a stop goes web -> reaper -> PostgreSQL, and
killing the supervisor outright leaves no process behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.served import Served, eventually, fresh_connections, gone
from tests.support import (
    PYTHON,
    ROOT,
    create_database,
    fetch_records,
    free_port,
    server_data_dir,
    wait_for,
)


@pytest.fixture(scope="module")
async def own_database(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def shared(own_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One broker for the tests that leave it running as they found it."""
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with Served(log, env={"DATABASE_URL": own_database}) as s:
        yield s


@pytest.fixture
def served(own_database: str, tmp_path: Path) -> Iterator[Served]:
    """A broker of the test's own, for tests that stop it."""
    with Served(tmp_path / "serve.log", env={"DATABASE_URL": own_database}) as s:
        yield s


@pytest.fixture
async def client(shared: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with fresh_connections(shared.url, timeout=10) as c:
        yield c


async def _push(client: httpx.AsyncClient, queue: str, txid: str,
                partition: str = "Default") -> httpx.Response:
    return await client.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": partition, "transactionId": txid, "payload": txid}]})


async def test_a_killed_web_worker_is_replaced_while_the_other_keeps_serving(
        shared: Served, client: httpx.AsyncClient, queue_name: str) -> None:
    workers = shared.children("web")
    assert len(workers) == 2
    victim = workers[0]
    queued: set[str] = set()
    unanswered: list[str] = []
    statuses: list[int] = []
    stop = asyncio.Event()

    async def producer(k: int) -> None:
        n = 0
        while not stop.is_set():
            txid = f"w{k}-{n}"
            n += 1
            try:
                r = await _push(client, queue_name, txid, partition=f"p{k}")
            except httpx.TransportError:
                unanswered.append(txid)  # in flight on the killed worker
                continue
            statuses.append(r.status_code)
            if r.status_code == 201 and r.json()[0]["status"] == "queued":
                queued.add(txid)

    producers = [asyncio.create_task(producer(k)) for k in range(4)]
    try:
        await wait_for(lambda: _at_least(queued, 20), timeout=15)
        os.kill(victim, signal.SIGKILL)
        killed_at = len(statuses)
        replaced = await eventually(
            lambda: (len(w := shared.children("web")) == 2 and victim not in w and w),
            timeout=15)
        served_meanwhile = len(statuses) - killed_at
        before = len(queued)
        await wait_for(lambda: _at_least(queued, before + 40), timeout=15)
    finally:
        stop.set()
        await asyncio.gather(*producers)

    assert shared.proc is not None and shared.proc.poll() is None
    assert workers[1] in replaced  # the survivor is the same process
    assert served_meanwhile > 0, "the other worker kept answering while one was replaced"
    assert set(statuses) == {201}, statuses
    # Only requests in flight on the killed worker can go unanswered.
    assert len(unanswered) <= 4, unanswered
    assert f"(pid {victim} was killed by SIGKILL)" in shared.log()
    stored = {r["transactionId"] for k in range(4)
              for r in (await fetch_records(client, queue_name, f"p{k}"))["records"]}
    assert queued <= stored


async def test_requests_sent_while_a_sole_web_worker_is_replaced_wait_and_are_answered(
        own_database: str, tmp_path: Path, queue_name: str) -> None:
    """One web worker (the default beside the embedded database on two CPUs): killed, it
    leaves nobody accepting; the listening socket is the supervisor's, so connections made
    meanwhile wait in its queue until the new worker takes them."""
    with Served(tmp_path / "serve.log", workers=1, env={"DATABASE_URL": own_database}) as one:
        (victim,) = one.children("web")
        os.kill(victim, signal.SIGKILL)
        # Fresh connections, sent at once: nothing answers them until the worker is back.
        async with fresh_connections(one.url, timeout=30) as client:
            answers = await asyncio.gather(*[_push(client, queue_name, f"t{n}")
                                             for n in range(5)])
            assert [r.status_code for r in answers] == [201] * 5
            assert all(r.json()[0]["status"] == "queued" for r in answers)
            stored = {r["transactionId"]
                      for r in (await fetch_records(client, queue_name, "Default"))["records"]}
        (replacement,) = one.children("web")
        assert replacement != victim
        assert f"(pid {victim} was killed by SIGKILL)" in one.log()
    assert stored == {f"t{n}" for n in range(5)}


async def _at_least(items: set[str], count: int) -> bool:
    return len(items) >= count


async def test_a_killed_reaper_is_restarted_and_expires_leases_again(
        shared: Served, client: httpx.AsyncClient, own_database: str,
        queue_name: str) -> None:
    (reaper,) = shared.children("reaper")
    os.kill(reaper, signal.SIGKILL)
    (restarted,) = await eventually(
        lambda: (r := shared.children("reaper")) and reaper not in r and r, timeout=15)
    assert restarted != reaper
    assert f"reaper (pid {reaper} was killed by SIGKILL)" in shared.log()
    assert shared.children("web") and shared.proc is not None and shared.proc.poll() is None

    # The new reaper does its job: a back-dated lease is cleared.
    assert (await _push(client, queue_name, "t0")).status_code == 201
    r = await client.get(f"/api/v1/pop/queue/{queue_name}", params={"wait": "false"})
    assert r.status_code == 200
    conn = await asyncpg.connect(own_database)
    try:
        await conn.execute("UPDATE queen.log_consumers SET lease_expires_at = now() - "
                           "interval '1 s' WHERE worker_id = $1", r.json()["leaseId"])

        async def cleared() -> bool:
            return await conn.fetchval("SELECT count(*) FROM queen.log_consumers "
                                       "WHERE worker_id = $1", r.json()["leaseId"]) == 0
        await wait_for(cleared, timeout=15)
    finally:
        await conn.close()


async def test_a_process_that_keeps_dying_stops_the_broker_naming_it(
        own_database: str, tmp_path: Path) -> None:
    served = Served(tmp_path / "serve.log", env={"DATABASE_URL": own_database,
                                                 "SUPERVISOR_MAX_RESTARTS": "1"}).start()
    try:
        tree = served.tree()
        (first,) = served.children("reaper")
        os.kill(first, signal.SIGKILL)
        (second,) = await eventually(
            lambda: (r := served.children("reaper")) and first not in r and r, timeout=15)
        os.kill(second, signal.SIGKILL)
        assert served.proc is not None
        assert served.proc.wait(30) == 1
    finally:
        served.stop()
    assert (f"reaper keeps dying (2 times in 60 s; last: pid {second} was killed by SIGKILL); "
            "stopping the broker") in served.log()
    assert all(gone(pid) for pid in tree), "the rest of the broker was stopped"


async def test_sigterm_stops_web_then_reaper_and_exits_cleanly(served: Served) -> None:
    tree = served.tree()
    started = time.monotonic()
    assert served.stop() == 0
    assert time.monotonic() - started < 15
    assert all(gone(pid) for pid in tree)
    log = served.log()
    web_stops = [log.index(line) for line in log.splitlines() if "queen.worker: stopping" in line]
    assert len(web_stops) == 2
    assert max(web_stops) < log.index("reaper stopped") < log.index("queen.serve: stopped")


@pytest.fixture(scope="module")
def data_dir() -> Iterator[str]:
    with server_data_dir("queen-serve-") as data:
        yield str(data)


@pytest.fixture
def embedded(data_dir: str, tmp_path: Path) -> Iterator[Served]:
    # No DATABASE_URL: serve starts its own (durable) PostgreSQL in the data directory.
    env = {"QUEEN_DATA_DIR": data_dir, "DATABASE_URL": "", "PG_HOST": "", "PG_PORT": "",
           "PG_USER": "", "PG_PASSWORD": "", "PG_DB": "", "PG_DATABASE": ""}
    with Served(tmp_path / "serve.log", env=env) as s:
        yield s


def _postmaster(served: Served) -> int:
    (pid,) = served.children("postgres")
    return pid


async def test_embedded_postgres_that_dies_is_restarted_on_its_data_and_the_broker_recovers(
        embedded: Served, queue_name: str) -> None:
    async with fresh_connections(embedded.url, timeout=10) as client:
        for n in range(10):
            assert (await _push(client, queue_name, f"before-{n}")).status_code == 201
        # A crash (kill -9), then an immediate shutdown (SIGQUIT) that nobody asked for.
        for round_, sig in enumerate((signal.SIGKILL, signal.SIGQUIT)):
            await _stop_postgres_and_see_it_back(embedded, client, sig)
            r = await _push(client, queue_name, f"after-{round_}")
            assert r.status_code == 201 and r.json()[0]["status"] == "queued", r.text
        records = (await fetch_records(client, queue_name))["records"]
    assert [r["transactionId"] for r in records] == \
        [f"before-{n}" for n in range(10)] + ["after-0", "after-1"]
    log = embedded.log()
    assert "was killed by SIGKILL" in log and log.count("postgres is ready again") == 2
    assert embedded.proc is not None and embedded.proc.poll() is None

    # Stop: web drains first, then the reaper, PostgreSQL last; nothing is left behind.
    tree = embedded.tree()
    assert embedded.stop() == 0
    assert all(gone(pid) for pid in tree)
    log = embedded.log()
    assert log.rindex("queen.worker: stopping") < log.rindex("reaper stopped")


async def test_a_second_broker_shares_the_embedded_database_through_the_printed_dsn(
        embedded: Served, tmp_path: Path, queue_name: str) -> None:
    # How a user runs two brokers over one database on one machine: ask the data directory's
    # address (or read it from the first broker's log), give it to the second as DATABASE_URL.
    done = await asyncio.to_thread(
        subprocess.run, [PYTHON, "-m", "broker.cli", "postgres", "--print-dsn"],
        env=embedded.env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    printed = done.stdout.strip()
    assert printed == _embedded_dsn(embedded)
    assert f"DATABASE_URL={printed}" in embedded.log()
    with Served(tmp_path / "second.log", workers=1, env={"DATABASE_URL": printed}) as second:
        async with fresh_connections(embedded.url, timeout=10) as first_client, \
                fresh_connections(second.url, timeout=10) as second_client:
            assert (await _push(first_client, queue_name, "via-the-first")).status_code == 201
            popped = await second_client.get(f"/api/v1/pop/queue/{queue_name}",
                                             params={"consumerGroup": "g", "autoAck": "true"})
            assert popped.status_code == 200, popped.text
            assert [m["data"] for m in popped.json()["messages"]] == ["via-the-first"]


async def _stop_postgres_and_see_it_back(embedded: Served, client: httpx.AsyncClient,
                                         sig: int) -> None:
    said = embedded.log().count("postgres is ready again")
    old = _postmaster(embedded)
    os.kill(old, sig)
    await eventually(lambda: gone(old), timeout=10)  # reaped: no zombie postmaster
    new = await eventually(
        lambda: (p := embedded.children("postgres")) and old not in p and p[0], timeout=30)
    assert new != old
    await wait_for(lambda: _healthy(client), timeout=30)
    # Each worker's LISTEN connection is back (pg_stat_activity, via the broker's DSN).
    dsn = _embedded_dsn(embedded)
    await wait_for(lambda: _listening_workers(dsn, 2), timeout=20)
    # The supervisor says so too. Its readiness check runs every half second, so the broker
    # can be healthy before it looks: wait for the line rather than read the log at once (a
    # kill before the check runs would reset it and the line would never come).
    await eventually(lambda: embedded.log().count("postgres is ready again") > said, timeout=10)


async def _healthy(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/health")).status_code == 200
    except httpx.TransportError:
        return False


def _embedded_dsn(served: Served) -> str:
    from core.embedded import EmbeddedPostgres

    return EmbeddedPostgres(Path(served.env["QUEEN_DATA_DIR"])).dsn


async def _listening_workers(dsn: str, count: int) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        listening = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'queen-broker%'"
            " AND query LIKE 'LISTEN %'")
    finally:
        await conn.close()
    return int(listening) >= count


async def test_killing_the_supervisor_outright_leaves_no_orphans(embedded: Served) -> None:
    tree = embedded.tree()
    assert embedded.children("postgres") and len(embedded.children("web")) == 2
    assert embedded.proc is not None
    embedded.proc.kill()
    embedded.proc.wait()
    # Workers get SIGTERM and PostgreSQL SIGINT from the kernel when their parent dies.
    await eventually(lambda: all(gone(pid, zombie_ok=True) for pid in tree), timeout=30)


async def test_the_procfile_runs_the_broker_under_honcho(tmp_path: Path) -> None:
    # Procfile lines call `queen-broker`; PYTHONPATH makes that console script (and
    # `python -m core.reaper`) run this checkout's code.
    env = {"PYTHONPATH": str(ROOT), "DATABASE_URL": "", "PG_HOST": "", "PG_PORT": "",
           "PG_USER": "", "PG_PASSWORD": "", "PG_DB": "", "PG_DATABASE": ""}
    with server_data_dir("queen-honcho-") as data:
        honcho = Served(tmp_path / "honcho.log", argv=[PYTHON, "-m", "honcho", "start"],
                        env={**env, "QUEEN_DATA_DIR": str(data)})
        honcho.env["QUEEN_PORT"] = str(honcho.port)  # honcho gives each process its own PORT
        honcho.env["QUEEN_KAFKA_PORT"] = str(free_port())  # the `kafka` line's listener
        with honcho:
            async with fresh_connections(honcho.url, timeout=10) as client:
                r = await _push(client, "procfile-q", "t0")
                assert r.status_code == 201 and r.json()[0]["status"] == "queued"
                tree = honcho.tree()
                # `web` replaces its own dead workers under honcho too.
                workers = honcho.descendants("broker.worker")
                assert len(workers) == 2
                os.kill(workers[0], signal.SIGKILL)
                await eventually(lambda: (w := honcho.descendants("broker.worker"))
                                 and len(w) == 2 and workers[0] not in w, timeout=20)
                assert (await _push(client, "procfile-q", "t1")).status_code == 201
        await eventually(lambda: all(gone(pid, zombie_ok=True) for pid in tree), timeout=30)
    log = honcho.log()
    assert "web.1" in log and "reaper.1" in log and "postgres.1" in log
    assert "kafka.1" in log and "Kafka listener on" in log
