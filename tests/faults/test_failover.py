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
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import psutil
import pytest

from core.embedded import BIN_DIR, SYSTEM_USER, EmbeddedPostgres, stop_process
from tests.support import (
    BrokerProcess,
    commits_wait_for_a_standby,
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


@contextlib.asynccontextmanager
async def _sync_pair(pair_dirs: tuple[Path, Path]) -> AsyncIterator[_Pair]:
    """A primary and a hot standby streaming from it synchronously, with a fresh database;
    both servers are stopped on the way out (the primary resumed first if frozen)."""
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
        yield _Pair(pg_a, proc_a, pg_b, proc_b, database)
    finally:
        if proc_a.poll() is None:
            _signal_tree(proc_a.pid, signal.SIGCONT)
        for proc in (proc_b, proc_a):
            if proc is not None:
                stop_process(proc, signal.SIGINT)


@dataclass
class _Pair:
    pg_a: EmbeddedPostgres
    proc_a: subprocess.Popen[bytes]
    pg_b: EmbeddedPostgres
    proc_b: subprocess.Popen[bytes]
    database: str

    @property
    def dsn(self) -> str:
        """Primary first, as an operator lists it; no target_session_attrs: several hosts
        mean read-write for a broker."""
        return _socket_dsn(self.database, self.pg_a, self.pg_b)

    async def promote_b(self) -> None:
        b = await asyncpg.connect(self.pg_b.dsn)
        try:
            assert await b.fetchval("SELECT pg_promote(wait => true)")
        finally:
            await b.close()

    def kill_a(self) -> None:
        """Done with a frozen old primary: kill it before the broker stops (a stopping
        broker's pool close waits up to 5 s for each server that does not answer)."""
        _signal_tree(self.proc_a.pid, signal.SIGKILL)
        self.proc_a.wait()


@pytest.mark.parametrize("death", ["SIGKILL", "SIGSTOP"])
async def test_broker_follows_the_promoted_standby_without_a_restart(
        death: str, pair_dirs: tuple[Path, Path], client: httpx.AsyncClient) -> None:
    """kill -9: the primary's sockets vanish. SIGSTOP: they stay and nothing answers (a frozen
    or partitioned machine); the broker must still reach the second host, which asyncpg's
    own multi-host connect never does (it spends its one timeout on the first host)."""
    async with _sync_pair(pair_dirs) as pair:
        with BrokerProcess(pair.dsn, workers=2) as broker:
            client.base_url = httpx.URL(broker.url)
            assert _status(await _push(client, "ha", "before")) == "queued"

            if death == "SIGKILL":  # the primary's machine dies
                pair.proc_a.kill()
                pair.proc_a.wait()
            else:  # it freezes, backends and all (each is a session of its own)
                _signal_tree(pair.proc_a.pid, signal.SIGSTOP)
            # No primary: the standby refuses writes; every push is 503 or buffered.
            gap = [_status(await _push(client, "ha", f"gap{i}")) for i in range(3)]
            assert set(gap) <= {"503", "buffered"}, gap

            await pair.promote_b()

            async def pushed_after() -> bool:
                return _status(await _push(client, "ha", "after")) in ("queued", "duplicate")
            await wait_for(pushed_after, timeout=60, interval=0.5)

            # The wake-up hub holds its connections on the new primary again.
            b = await asyncpg.connect(pair.pg_b.dsn)
            try:
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
            got = await _stored(client, "ha", expected)
            assert set(got) <= expected | {f"gap{i}" for i in range(3)}
            if death == "SIGSTOP":
                pair.kill_a()


async def _stored(client: httpx.AsyncClient, queue: str, expected: set[str]) -> list[str]:
    """The transactionIds stored in the queue once they include `expected` (each once)."""
    seen: list[str] = []

    async def stored() -> list[str] | None:
        got = [r["transactionId"] for r in (await fetch_records(client, queue))["records"]]
        seen[:] = got
        return got if expected <= set(got) else None
    try:
        got: list[str] = await wait_for(stored, timeout=60, interval=0.5)
    except AssertionError:
        raise AssertionError(f"stored {seen}, expected {expected}") from None
    assert sorted(got) == sorted(set(got)), got  # no message stored twice
    return got


@dataclass
class _Answer:
    txid: str
    t0: float
    t1: float
    status: str


async def _push_every(client: httpx.AsyncClient, queue: str, seconds: float,
                      answers: list[_Answer]) -> None:
    """Push one message every `seconds` (one at a time, as a producer does), recording each
    answer, until cancelled."""
    n = 0
    while True:
        txid = f"w{n}"
        n += 1
        t0 = time.monotonic()
        status = _status(await _push(client, queue, txid))
        answers.append(_Answer(txid, t0, time.monotonic(), status))
        await asyncio.sleep(seconds)


async def test_writes_follow_the_promotion_while_the_old_primary_is_still_frozen(
        pair_dirs: tuple[Path, Path], client: httpx.AsyncClient) -> None:
    """Issue 29, with the broker's default settings: the primary freezes (SIGSTOP: its
    sockets stay open and its kernel acknowledges everything, so only the broker's own
    watch can tell it is silent), the standby is promoted 2 s later, and pushes are
    committed on it within 10 s of the promotion, while the old primary is still frozen.
    Before, the pool's connections stayed on the frozen server until the driver gave up on
    their statements (statement timeout 30 s + 5 s). No push waits past its 8 s answer; an
    ack caught on the frozen server is answered as an outage, not after 30 s."""
    async with _sync_pair(pair_dirs) as pair:
        with BrokerProcess(pair.dsn, workers=2) as broker:
            client.base_url = httpx.URL(broker.url)
            assert _status(await _push(client, "follow", "before")) == "queued"
            r = await client.get("/api/v1/pop/queue/follow?wait=false&consumerGroup=g")
            assert r.status_code == 200, r.text
            (popped,) = r.json()["messages"]
            answers: list[_Answer] = []
            pusher = asyncio.create_task(_push_every(client, "follow", 0.2, answers))
            try:
                await asyncio.sleep(1.0)
                _signal_tree(pair.proc_a.pid, signal.SIGSTOP)
                frozen_at = time.monotonic()
                # An ack sent to the frozen server: answered as an outage within seconds.
                ack = asyncio.ensure_future(client.post("/api/v1/ack", json={
                    "transactionId": popped["transactionId"], "consumerGroup": "g",
                    "partitionId": popped["partitionId"], "leaseId": popped["leaseId"],
                    "status": "completed"}))
                # Promoted before the broker can have noticed the silence (4 s).
                await asyncio.sleep(2.0)
                await pair.promote_b()
                promoted_at = time.monotonic()
                acked = await ack
                ack_waited = time.monotonic() - frozen_at
                assert acked.status_code == 503 and acked.headers.get("Retry-After"), \
                    acked.text
                assert ack_waited < 10, ack_waited

                async def committed_after_promotion() -> _Answer | None:
                    return next((a for a in answers if a.t0 >= promoted_at
                                 and a.status == "queued"), None)
                first = await wait_for(committed_after_promotion, timeout=40, interval=0.1)
                # ... while the old primary is still frozen.
                assert psutil.Process(pair.proc_a.pid).status() == psutil.STATUS_STOPPED
            finally:
                pusher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pusher
            pause = first.t1 - promoted_at
            print(f"first commit {pause:.1f} s after the promotion "
                  f"({first.t1 - frozen_at:.1f} s after the freeze); ack answered 503 after "
                  f"{ack_waited:.1f} s")
            assert pause <= 10.0, pause
            longest = max(a.t1 - a.t0 for a in answers)
            assert longest <= 9.0, [(a.txid, round(a.t1 - a.t0, 1), a.status) for a in answers]
            assert {a.status for a in answers} <= {"queued", "buffered", "503"}, answers

            pair.kill_a()
            # Everything answered queued or buffered is stored once on the new primary.
            await _stored(client, "follow", {"before"} | {
                a.txid for a in answers if a.status in ("queued", "buffered")})


async def test_a_read_only_server_answering_a_write_is_an_outage_not_an_error(
        pair_dirs: tuple[Path, Path], client: httpx.AsyncClient) -> None:
    async with _served(pair_dirs[0], client) as (_, url):
        assert _status(await _push(client, "ro", "w0")) == "queued"
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            await conn.execute("SELECT pg_reload_conf()")

            # pg_reload_conf() only signals the postmaster, which then signals every backend;
            # a backend applies the reload before its next command. Once this connection's
            # backend has it, the broker's pooled ones have been signalled too. (Without the
            # wait, a push on a loaded machine could still be stored: `queued`.)
            async def reloaded() -> bool:
                return await conn.fetchval("SHOW default_transaction_read_only") == "on"
            await wait_for(reloaded, timeout=30)
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

            await commits_wait_for_a_standby(url, conn)
            push = asyncio.ensure_future(_push(client, "doubt", "x1"))

            async def waiting_backend() -> int | None:  # the push's commit, not another's
                return await conn.fetchval(  # type: ignore[no-any-return]
                    "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
                    " AND query LIKE '%append_partitions%'")
            try:
                await wait_for(waiting_backend, timeout=30)
            except AssertionError:  # say what the database was doing instead
                rows = await conn.fetch(
                    "SELECT application_name, state, wait_event, left(query, 120) AS q"
                    " FROM pg_stat_activity WHERE datname = current_database()")
                raise AssertionError(f"no push waits for the standby; push done: "
                                     f"{push.done()}; sessions: {[dict(r) for r in rows]}")
            await conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            # Every waiter, not the first one found: the broker's statistics writer waits there
            # too, and the test is about the push's commit being cut.
            await conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                               " WHERE wait_event = 'SyncRep'")
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


@pytest.mark.parametrize("path", ["push", "transaction"])
async def test_a_commit_kept_without_its_standby_is_not_answered_queued(
        path: str, pair_dirs: tuple[Path, Path], client: httpx.AsyncClient) -> None:
    """A commit waiting for a synchronous standby that never answers is cancelled (as an
    operator's pg_cancel_backend does); PostgreSQL then keeps it, local already, and answers
    success with a warning only. The standby may not have it: the broker must not answer
    `queued` (core/storage/durability.py), and the retry must be a duplicate."""
    async with _served(pair_dirs[0], client, synchronous_commit="on") as (_, url):
        assert _status(await _push(client, "kept", "warm")) == "queued"
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
            await conn.execute("SELECT pg_reload_conf()")

            await commits_wait_for_a_standby(url, conn)
            if path == "push":
                answer = asyncio.ensure_future(_push(client, "kept", "x1"))
                commit = "query LIKE '%append_partitions%'"
            else:
                answer = asyncio.ensure_future(client.post("/api/v1/transaction", json={
                    "operations": [{"type": "push", "items": [
                        {"queue": "kept", "payload": {"t": "x1"}, "transactionId": "x1"}]}]}))
                commit = "query ILIKE 'COMMIT%' AND application_name = 'queen-broker'"

            async def waiting_backend() -> int | None:  # the request's commit, no other
                return await conn.fetchval(  # type: ignore[no-any-return]
                    f"SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND {commit}")
            pid = await wait_for(waiting_backend, timeout=30)
            await conn.execute("SELECT pg_cancel_backend($1)", pid)
            r = await answer
            if path == "push":
                assert _status(r) in ("503", "buffered")
            else:
                assert r.status_code == 503 and r.headers.get("Retry-After"), r.text
            await conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()

        async def retried() -> str | None:
            s = _status(await _push(client, "kept", "x1"))
            return s if s in ("queued", "duplicate") else None
        assert await wait_for(retried, timeout=30, interval=0.3) == "duplicate"
        got = [r["transactionId"] for r in (await fetch_records(client, "kept"))["records"]]
        assert got == ["warm", "x1"]


@pytest.mark.parametrize("group", [None, "g"])
async def test_a_long_poll_answers_by_its_deadline_while_the_database_is_frozen(
        group: str | None, pair_dirs: tuple[Path, Path], client: httpx.AsyncClient) -> None:
    """A primary that stops answering without closing anything (frozen, partitioned: the
    first seconds of a failover) holds a statement until the broker's watch gives up on it;
    a long poll must still answer by its deadline (its timeout + 5 s for the fault ledger),
    also a consumer group's, whose answer depends on the group's conflation record: after
    an outage that is not looked up again (it would wait for the outage once more)."""
    async with _served(pair_dirs[0], client) as (proc, _):
        assert _status(await _push(client, "frozen", "m0")) == "queued"
        if group is not None:  # the group's record exists: the pop reads it first
            r = await client.get(f"/api/v1/pop/queue/frozen?wait=false&consumerGroup={group}")
            assert r.status_code == 200, r.text
        _signal_tree(proc.pid, signal.SIGSTOP)
        try:
            query = "wait=true&timeout=1000" + (f"&consumerGroup={group}" if group else "")
            started = time.monotonic()
            # The pool's idle connection takes the claim and the server never answers it.
            r = await client.get(f"/api/v1/pop/queue/frozen?{query}", timeout=20)
            waited = time.monotonic() - started
            assert r.status_code in (200, 204), r.text
            assert waited < 1.0 + 5.0, waited
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
