"""Following the primary (docs/deploying/high-availability.md): a broker given several hosts finds the read-write one,
answers 503 / `buffered` (never 500, never a lie) while there is none, and carries on on the
promoted standby without a restart. Also: a read-only server answering a write is an outage,
and a commit whose connection is lost while it waits (in doubt) is answered 503 and its retry
is a dedup duplicate.

The pair is two embedded PostgreSQL servers of this module's own: a primary and a hot standby
cloned from it with pg_basebackup, streaming from it; "failover" is kill -9 of the primary and
pg_promote() on the standby (what Patroni does, without Patroni: tests/ stays free of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import psutil
import pytest

from core.embedded import BIN_DIR, SYSTEM_USER, EmbeddedPostgres, stop_process
from tests.support import (
    BrokerProcess,
    create_database,
    fetch_records,
    restart_embedded,
    server_data_dir,
    wait_for,
)

pytestmark = pytest.mark.timeout(240)
_RUN_AS = SYSTEM_USER if os.geteuid() == 0 else None


def clone_standby(primary: EmbeddedPostgres, data_dir: Path) -> None:
    """A hot standby of `primary` in `data_dir/pg`, streaming from it (pg_basebackup -R)."""
    if _RUN_AS:
        shutil.chown(data_dir, _RUN_AS, _RUN_AS)
    subprocess.run([str(BIN_DIR / "pg_basebackup"), "-h", str(primary.socket_dir), "-p",
                    "5432", "-U", "postgres", "-D", str(data_dir / "pg"), "-R", "-X", "stream",
                    "-c", "fast"], check=True, user=_RUN_AS, capture_output=True)


def _signal_tree(pid: int, sig: int) -> None:
    for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


@pytest.fixture
def pair_dirs() -> Iterator[tuple[Path, Path]]:
    with server_data_dir("queen-ha-a-") as a, server_data_dir("queen-ha-b-") as b:
        yield a, b


def _socket_dsn(database: str, *servers: EmbeddedPostgres) -> str:
    hosts = ",".join(str(s.socket_dir) for s in servers)
    ports = ",".join("5432" for _ in servers)
    return f"postgresql://postgres@/{database}?host={hosts}&port={ports}"


async def _push(client: httpx.AsyncClient, queue: str, txid: str) -> httpx.Response:
    return await client.post("/api/v1/push", json={"items": [
        {"queue": queue, "payload": {"t": txid}, "transactionId": txid}]})


def _status(r: httpx.Response) -> str:
    """`queued` / `buffered` / `duplicate` for a 201, `503` for an outage; anything else fails."""
    if r.status_code == 503:
        assert r.headers.get("Retry-After"), r.headers
        return "503"
    assert r.status_code == 201, (r.status_code, r.text)
    return str(r.json()[0]["status"])


@contextlib.asynccontextmanager
async def _served(data_dir: Path, client: httpx.AsyncClient, env: dict[str, str] | None = None,
                  **pg_settings: str) -> AsyncIterator[tuple[subprocess.Popen[bytes], str]]:
    """One embedded server of the test's own, a fresh database on it and a 1-worker broker
    that `client` talks to; yields the server's process and the database's URL."""
    pg, proc = restart_embedded(data_dir, **pg_settings)
    try:
        url = await create_database(pg.dsn)
        with BrokerProcess(url, workers=1, env=env) as broker:
            client.base_url = httpx.URL(broker.url)
            yield proc, url
    finally:
        stop_process(proc, signal.SIGINT)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as c:
        yield c


@pytest.mark.parametrize("death", ["SIGKILL", "SIGSTOP"])
async def test_broker_follows_the_promoted_standby_without_a_restart(
        death: str, pair_dirs: tuple[Path, Path], client: httpx.AsyncClient) -> None:
    """kill -9: the primary's sockets vanish. SIGSTOP: they stay and nothing answers (a frozen
    or partitioned machine); the broker must still reach the second host, which asyncpg's
    own multi-host connect never does (it spends its one timeout on the first host)."""
    dir_a, dir_b = pair_dirs
    pg_a, proc_a = restart_embedded(dir_a, synchronous_commit="on")
    proc_b = None
    try:
        url = await create_database(pg_a.dsn)
        database = urlsplit(url).path.lstrip("/")
        clone_standby(pg_a, dir_b)
        pg_b, proc_b = restart_embedded(dir_b, synchronous_commit="on")
        # Synchronous replication: a commit is acknowledged once the standby has it, so an
        # acknowledged push survives the primary's death (with asynchronous replication the
        # last ones may not: the first version of this test lost "before" that way).
        a = await asyncpg.connect(pg_a.dsn)
        try:
            await a.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            await a.execute("SELECT pg_reload_conf()")

            async def sync_standby() -> bool:
                return bool(await a.fetchval(
                    "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"))
            await wait_for(sync_standby, timeout=30, interval=0.2)
        finally:
            await a.close()
        # Primary first, as an operator lists it; no target_session_attrs: several hosts
        # mean read-write for a broker.
        # A short statement timeout: statements caught on a frozen primary give up sooner.
        with BrokerProcess(_socket_dsn(database, pg_a, pg_b), workers=2,
                           env={"DB_STATEMENT_TIMEOUT": "3000"}) as broker:
            client.base_url = httpx.URL(broker.url)
            assert _status(await _push(client, "ha", "before")) == "queued"

            if death == "SIGKILL":  # the primary's machine dies
                proc_a.kill()
                proc_a.wait()
            else:  # it freezes, backends and all (each is a session of its own)
                _signal_tree(proc_a.pid, signal.SIGSTOP)
            # No primary: the standby refuses writes; every push is 503 or buffered.
            gap = [_status(await _push(client, "ha", f"gap{i}")) for i in range(3)]
            assert set(gap) <= {"503", "buffered"}, gap

            b = await asyncpg.connect(pg_b.dsn)
            try:
                assert await b.fetchval("SELECT pg_promote(wait => true)")

                async def pushed_after() -> bool:
                    return _status(await _push(client, "ha", "after")) in ("queued", "duplicate")
                await wait_for(pushed_after, timeout=60, interval=0.5)

                # The wake-up hub holds its connections on the new primary again.
                async def hub_on_b() -> bool:
                    return bool(await b.fetchval(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE application_name = 'queen-broker-wakeup'"))
                assert await wait_for(hub_on_b, timeout=30, interval=0.5)
            finally:
                await b.close()

            # Everything answered queued or buffered is stored once on the new primary.
            expected = {"before", "after"} | {f"gap{i}" for i, s in enumerate(gap)
                                              if s == "buffered"}

            seen: list[str] = []

            async def stored() -> list[str] | None:
                got = [r["transactionId"] for r in (await fetch_records(client, "ha"))["records"]]
                seen[:] = got
                return got if expected <= set(got) else None
            try:
                got = await wait_for(stored, timeout=60, interval=0.5)
            except AssertionError:
                raise AssertionError(f"stored {seen}, expected {expected}") from None
            assert sorted(got) == sorted(set(got)), got  # no message stored twice
            assert set(got) <= expected | {f"gap{i}" for i in range(3)}
            if death == "SIGSTOP":
                # Done with the frozen old primary: kill it before the broker stops. Its
                # stop closes the pool, which waits for connections still open on a frozen
                # server without end: cut only by BrokerProcess.stop's 15 s timeout.
                _signal_tree(proc_a.pid, signal.SIGKILL)
                proc_a.wait()
    finally:
        if proc_a.poll() is None:
            _signal_tree(proc_a.pid, signal.SIGCONT)
        for proc in (proc_b, proc_a):
            if proc is not None:
                stop_process(proc, signal.SIGINT)


async def test_a_read_only_server_answering_a_write_is_an_outage_not_an_error(
        pair_dirs: tuple[Path, Path], client: httpx.AsyncClient) -> None:
    async with _served(pair_dirs[0], client) as (_, url):
        assert _status(await _push(client, "ro", "w0")) == "queued"
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            await conn.execute("SELECT pg_reload_conf()")
            # Taken by the spool as in any outage (a StorageError 503 before this change).
            assert _status(await _push(client, "ro", "w1")) == "buffered"
            await conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()

        async def drained() -> bool:
            got = [r["transactionId"] for r in (await fetch_records(client, "ro"))["records"]]
            return got == ["w0", "w1"]
        await wait_for(drained, timeout=30, interval=0.3)
        assert _status(await _push(client, "ro", "w2")) == "queued"


async def test_a_commit_in_doubt_is_answered_503_and_its_retry_is_a_duplicate(
        pair_dirs: tuple[Path, Path], client: httpx.AsyncClient) -> None:
    """The commit is written locally, then waits for a synchronous standby that never
    answers; the connection is cut there (as when the primary dies at that moment). The
    broker cannot know whether it committed: it must not answer `queued`, and the client's
    retry with the same transactionId must not store a second message."""
    async with _served(pair_dirs[0], client, synchronous_commit="on") as (_, url):
        assert _status(await _push(client, "doubt", "warm")) == "queued"
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
            await conn.execute("SELECT pg_reload_conf()")

            async def reloaded() -> bool:  # the server re-read its configuration
                return await conn.fetchval("SHOW synchronous_standby_names") == "nobody"
            await wait_for(reloaded, timeout=30)
            push = asyncio.ensure_future(_push(client, "doubt", "x1"))

            async def waiting_backend() -> int | None:
                return await conn.fetchval(  # type: ignore[no-any-return]
                    "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
            pid = await wait_for(waiting_backend, timeout=30)
            await conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            await conn.execute("SELECT pg_terminate_backend($1)", pid)
            # Not `queued` (it may not have committed): an outage, which the push spool
            # takes (`buffered`: its replay will meet the stored copy as a duplicate).
            assert _status(await push) in ("503", "buffered")
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()

        async def retried() -> str | None:
            s = _status(await _push(client, "doubt", "x1"))
            return s if s in ("queued", "duplicate") else None
        # It did commit locally: the client's retry finds it.
        assert await wait_for(retried, timeout=30, interval=0.3) == "duplicate"
        got = [r["transactionId"] for r in (await fetch_records(client, "doubt"))["records"]]
        assert got == ["warm", "x1"]


async def test_a_long_poll_answers_by_its_deadline_while_the_database_is_frozen(
        pair_dirs: tuple[Path, Path], client: httpx.AsyncClient) -> None:
    """A primary that stops answering without closing anything (frozen, partitioned: the
    first seconds of a failover) holds a statement until the driver gives up (statement
    timeout + 5 s, 35 s by default); a long poll must still answer by its deadline."""
    async with _served(pair_dirs[0], client) as (proc, _):
        assert _status(await _push(client, "frozen", "m0")) == "queued"
        _signal_tree(proc.pid, signal.SIGSTOP)
        try:
            # 1 s of long poll, and a client that waits 20 s (liveness, not speed): the
            # pool's idle connection takes the claim and the server never answers it.
            r = await client.get("/api/v1/pop/queue/frozen?wait=true&timeout=1000",
                                 timeout=20)
            assert r.status_code in (200, 204), r.text
        finally:
            _signal_tree(proc.pid, signal.SIGCONT)


async def test_a_push_answers_while_the_database_is_frozen_and_is_stored_once(
        pair_dirs: tuple[Path, Path], client: httpx.AsyncClient) -> None:
    """A push caught on a frozen primary is answered within PUSH_ANSWER_TIMEOUT_MS (as an
    outage: `buffered` by the spool), not when the driver gives up (35 s by default); its
    write, which may still commit when the server thaws, and the spool's replay make one
    stored message."""
    async with _served(pair_dirs[0], client, env={"PUSH_ANSWER_TIMEOUT_MS": "2000"}) as (
            proc, _):
        assert _status(await _push(client, "frozen-push", "p0")) == "queued"
        _signal_tree(proc.pid, signal.SIGSTOP)
        try:
            r = await client.post("/api/v1/push", timeout=20, json={"items": [
                {"queue": "frozen-push", "payload": {}, "transactionId": "p1"}]})
            assert _status(r) in ("buffered", "503")
        finally:
            _signal_tree(proc.pid, signal.SIGCONT)

        async def stored() -> list[str] | None:
            got = [r["transactionId"]
                   for r in (await fetch_records(client, "frozen-push"))["records"]]
            return got if "p1" in got else None
        assert await wait_for(stored, timeout=60, interval=0.5) == ["p0", "p1"]
