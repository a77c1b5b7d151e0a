"""Test helpers: a throwaway PostgreSQL, fresh databases, and real broker processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Self

import asyncpg
import httpx

from broker.ports import free_port
from core.embedded import EmbeddedPostgres, stop_process
from core.engine.listener import WakeupHub
from core.engine.wake_link import WakeLink
from core.settings import database_url_from_env
from core.storage.database import Database

if TYPE_CHECKING:
    from core.engine.pop import PopRequest, PopResult
    from core.engine.ready.reader import Reader

ROOT = Path(__file__).resolve().parent.parent
# Speed settings for the test server only; benchmarks and production keep fsync on.
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                 "max_connections": "400"}
# Where test brokers keep their push spools unless a test gives its own: outside the work
# tree. Each database gets its own directory below it (core/engine/spool.py), so brokers of
# different tests never drain each other's files, and a broker restarted on the same
# database finds what its predecessor left.
TEST_SPOOL_DIR = str(Path(tempfile.gettempdir()) / "queen-test-spool")
# The byte budgets of `budget_broker` (tests/conftest.py): a pop's answer
# (QUEEN_POP_MAX_BYTES) and a listing's page (QUEEN_LIST_MAX_BYTES).
ANSWER_BUDGET = 1024 * 1024


def external_database_url() -> str | None:
    """DATABASE_URL / PG_* from the environment, if the tester pointed at a server."""
    return database_url_from_env(os.environ)


def start_embedded(data_dir: Path, **extra: str) -> tuple[EmbeddedPostgres, subprocess.Popen[bytes]]:
    pg = EmbeddedPostgres(data_dir, settings={**FAST_SETTINGS, **extra})
    return pg, pg.start()


@contextlib.contextmanager
def server_data_dir(prefix: str) -> Iterator[Path]:
    """A data directory for an embedded PostgreSQL that a test starts more than once.

    It lives outside pytest's temporary tree: any pytest session starting on this machine
    makes that tree private to its owner again, and PostgreSQL runs as another user when the
    tests run as root, so a restart there can fail with "Permission denied"."""
    with tempfile.TemporaryDirectory(prefix=prefix) as data:
        yield Path(data)


def restart_embedded(data_dir: Path, **extra: str
                     ) -> tuple[EmbeddedPostgres, subprocess.Popen[bytes]]:
    """`start_embedded` on a data directory whose server was just killed: after kill -9 the
    old backends may hold the shared memory for a moment, and PostgreSQL refuses to start."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return start_embedded(data_dir, **extra)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


async def create_database(server_url: str, *, migrate: bool = True) -> str:
    """A fresh database on the server, migrated; answers its URL."""
    from loadtest.launch import fresh_database

    return await fresh_database(server_url, prefix="queen_test_", migrate=migrate)


class BrokerProcess:
    """`hypercorn` serving the broker app (and optionally the reaper) as real processes."""

    def __init__(self, database_url: str, *, workers: int = 2, reaper: bool = False,
                 env: dict[str, str] | None = None, port: int | None = None,
                 log_path: Path | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.database_url = database_url
        self.workers = workers
        self.with_reaper = reaper
        self.port = port or free_port()
        # With `tls` (a client context that trusts the broker's certificate): over https.
        self.tls = tls
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.env = {**os.environ, "DATABASE_URL": database_url, "HOST": "127.0.0.1",
                    "PORT": str(self.port), "WORKERS": str(workers), "LOG_LEVEL": "warning",
                    "FILE_BUFFER_DIR": TEST_SPOOL_DIR, **(env or {})}
        self.log_path = log_path  # the web processes' output goes there instead of ours
        self.web: subprocess.Popen[bytes] | None = None
        self.reaper: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0, *, wait: bool = True) -> BrokerProcess:
        """Spawn the processes; with `wait`, answer once /health says 200."""
        from broker.supervisor import reaper_command, terminate_with_parent, web_command
        from core.settings import Settings

        settings = Settings.from_env(self.env)
        # A killed test run must not leave brokers behind: they die with this process.
        log = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115
        self.web = subprocess.Popen(web_command(settings), env=self.env, cwd=ROOT,
                                    start_new_session=True, stdout=log,
                                    stderr=subprocess.STDOUT if log else None,
                                    preexec_fn=terminate_with_parent)  # noqa: PLW1509
        if log is not None:
            log.close()  # the child has its own descriptor
        if self.with_reaper:
            self.reaper = subprocess.Popen(reaper_command(), env=self.env, cwd=ROOT,
                                           start_new_session=True,
                                           preexec_fn=terminate_with_parent)  # noqa: PLW1509
        if wait:
            self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        # One client for every poll: a client per poll built a TLS context each time (tens of
        # milliseconds of CPU, taken from the workers starting on the same cores).
        with httpx.Client(timeout=1, verify=self.tls or True) as client:
            while time.monotonic() < deadline:
                assert self.web is not None
                if self.web.poll() is not None:
                    raise RuntimeError(f"broker exited with {self.web.returncode}")
                try:
                    if client.get(self.url + "/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        raise RuntimeError("broker did not become healthy")

    def kill(self) -> None:
        """kill -9 of every process this object started and of their children (by pid, all
        at once, so no web worker outlives its supervisor to drain)."""
        import psutil

        from loadtest.faults.roles import wait_gone

        for proc in (self.reaper, self.web):
            if proc is None or proc.poll() is not None:
                continue
            try:
                tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True)]
            except psutil.Error:
                tree = []
            for member in tree:
                with contextlib.suppress(psutil.Error):
                    member.kill()
            proc.wait()
            # Until each has exited, not until it is reaped: the workers are the killed
            # supervisor's children, so init reaps them, and on this VM that took 1.4-2 s
            # (psutil.wait_procs waited it out on every kill). A zombie holds no socket.
            wait_gone([m.pid for m in tree[1:]], 10, interval=0.01)
        self.web = self.reaper = None

    def stop(self) -> None:
        for proc in (self.reaper, self.web):
            if proc is not None:
                stop_process(proc, signal.SIGTERM, timeout=15)
        self.web = self.reaper = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):  # type: ignore[no-untyped-def]
    """Poll an async predicate until it returns a truthy value; answer that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


PYTHON = sys.executable


async def fetch_records(client: httpx.AsyncClient, queue: str, partition: str = "Default",
                        offset: int = 0) -> dict:  # type: ignore[type-arg]
    """Every record of one partition from `offset` via /api/v1/fetch (follows maxBytes pages)."""
    records: list[dict] = []  # type: ignore[type-arg]
    while True:
        r = await client.post("/api/v1/fetch", json={
            "entries": [{"queue": queue, "partition": partition, "offset": offset}]})
        assert r.status_code == 200, r.text
        entry = r.json()["entries"][0]
        records += entry["records"]
        if not entry["records"] or entry.get("error"):
            return {**entry, "records": records}
        offset = entry["records"][-1]["offset"] + 1
        if offset >= entry["highWatermark"]:
            return {**entry, "records": records}


async def wake_link(hub: WakeupHub, conn: asyncpg.Connection, queue: str) -> WakeLink:
    """The node `hub` sends `queue`'s wake-up notifications to (on Citus, one of the
    workers: core/engine/wake_nodes.py); `conn` is on the database (the coordinator)."""
    queue_id = await conn.fetchval("SELECT id FROM queen.queues WHERE name = $1", queue)
    assert queue_id is not None, queue
    return hub.link_of(int(queue_id))


async def queue_counts(conn: asyncpg.Connection, queue: str) -> dict[str, int]:
    """Rows the queue owns, table by table (all zero once it is deleted or never created)."""
    row = await conn.fetchrow(
        """
        WITH q AS (SELECT id FROM queen.queues WHERE name = $1),
             p AS (SELECT id FROM queen.log_partitions WHERE queue_id IN (SELECT id FROM q))
        SELECT (SELECT count(*) FROM q) AS queues,
               (SELECT count(*) FROM p) AS partitions,
               (SELECT count(*) FROM queen.log_segments
                 WHERE partition_id IN (SELECT id FROM p)) AS segments,
               (SELECT count(*) FROM queen.log_txn_index
                 WHERE partition_id IN (SELECT id FROM p)) AS txn_index
        """, queue)
    assert row is not None
    return dict(row)


# --- read path helpers (pop / ack / leases) ------------------------------------------------

async def push_items(client: httpx.AsyncClient, queue: str, payloads: list, *,  # type: ignore[type-arg]
                     partition: str = "Default", prefix: str = "t") -> list[str]:
    """Push `payloads` to one partition with transactionIds `<prefix>0..n-1`; answer the ids."""
    ids = [f"{prefix}{i}" for i in range(len(payloads))]
    r = await client.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": partition, "payload": p, "transactionId": t}
        for p, t in zip(payloads, ids)]})
    assert r.status_code == 201, r.text
    assert [e["status"] for e in r.json()] == ["queued"] * len(ids), r.text
    return ids


async def configure(client: httpx.AsyncClient, queue: str, **options: object) -> dict:  # type: ignore[type-arg]
    r = await client.post("/api/v1/configure", json={"queue": queue, "options": options})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def pop_json(client: httpx.AsyncClient, queue: str, **params: object) -> dict | None:  # type: ignore[type-arg]
    """A non-waiting pop by default; answers the JSON body, or None for a 204."""
    query = {"wait": "false", **{k: str(v).lower() if isinstance(v, bool) else str(v)
                                 for k, v in params.items()}}
    r = await client.get(f"/api/v1/pop/queue/{queue}", params=query)
    assert r.status_code in (200, 204), r.text
    if r.status_code == 204:
        assert r.content == b""
        return None
    return r.json()  # type: ignore[no-any-return]


async def cursor_row(conn: asyncpg.Connection, queue: str, group: str = "__QUEUE_MODE__",
                     partition: str = "Default") -> asyncpg.Record | None:
    """The group's cursor row on one partition (committed, batch_end, worker_id, ...)."""
    return await conn.fetchrow(
        """SELECT c.*, (c.worker_id IS NOT NULL AND c.lease_expires_at > now()) AS lease_live
             FROM queen.log_consumers c
             JOIN queen.log_partitions p ON p.id = c.partition_id
             JOIN queen.queues q ON q.id = p.queue_id
            WHERE q.name = $1 AND p.name = $3 AND c.consumer_group = $2""",
        queue, group, partition)


async def expire_leases_of(conn: asyncpg.Connection, queue: str) -> int:
    """Back-date every lease on the queue so it is expired now (instead of sleeping), and
    announce it as the reaper announces the leases it releases, so the brokers' ready sets
    (which expect those leases to end later) look again."""
    status = await conn.execute(
        """UPDATE queen.log_consumers c SET lease_expires_at = now() - interval '1 second'
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
            WHERE c.partition_id = p.id AND q.name = $1 AND c.worker_id IS NOT NULL""", queue)
    await announce_changed(conn, queue)
    return int(status.split()[-1])


async def announce_changed(conn: asyncpg.Connection, queue: str, *,
                           pause: float = 0.2) -> None:
    """Tell every broker process that anything in the queue may have changed (a wake-up
    naming no partition: their ready sets rescan the queue before trusting it again), as
    a test that edits the database behind the brokers' backs must; then give the
    notification `pause` seconds to arrive (it is asynchronous). A test that makes sure
    otherwise that its broker heard it passes 0 (tests/faults/test_model.py)."""
    await conn.execute("SELECT pg_notify('queen_wakeup', id::text) FROM queen.queues "
                       "WHERE name = $1", queue)
    await asyncio.sleep(pause)


async def prune_index_of(conn: asyncpg.Connection, db: Database, queue: str) -> None:
    """Make the queue's transactionId index rows two hours old (older than the index keeps
    any) and run the reaper's pruning step on `db`, which deletes them and marks their
    partitions (schema/migrations/095_ack_parity.sql)."""
    from core.upkeep import maintenance

    await conn.execute(
        # (Shifted in UTC: Citus pushes only immutable arithmetic on a column down.)
        """UPDATE queen.log_txn_index i
              SET created_at = ((i.created_at AT TIME ZONE 'UTC') - interval '2 hours')
                               AT TIME ZONE 'UTC'
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
            WHERE i.partition_id = p.id AND q.name = $1""", queue)
    await maintenance.prune_txn_index(db)


async def dlq_rows(conn: asyncpg.Connection, queue: str) -> list[dict]:  # type: ignore[type-arg]
    """The queue's dead letters as the broker reads them (a DLQ row since version 23 holds
    a copy of its segment, from which core.admin.dlq extracts the message), with `payload_text`,
    in offset order."""
    from core.admin.dlq import dead_letter
    from core.storage.dead_letters import DeadLetterRow

    records = await conn.fetch(
        """SELECT d.id, d.partition_id, q.name AS queue, p.name AS partition, d.consumer_group,
                  d.msg_offset, d.transaction_id, d.message_id, d.trace_id, d.producer_sub,
                  d.payload, d.segment_base, ds.blob AS segment_blob, d.error_message,
                  d.retry_count, d.created_at, d.failed_at
             FROM queen.log_dlq d
             JOIN queen.log_partitions p ON p.id = d.partition_id
             JOIN queen.queues q ON q.id = p.queue_id
             LEFT JOIN queen.log_dlq_segments ds
               ON ds.partition_id = d.partition_id AND ds.base_offset = d.segment_base
            WHERE q.name = $1 ORDER BY d.msg_offset, d.id""", queue)
    out = []
    for r in records:
        letter = dead_letter(DeadLetterRow(*r))
        out.append({"id": letter.id, "partition_id": letter.partition_id,
                    "consumer_group": letter.consumer_group, "msg_offset": letter.offset,
                    "transaction_id": letter.transaction_id, "message_id": letter.message_id,
                    "trace_id": letter.trace_id, "producer_sub": letter.producer_sub,
                    "error_message": letter.error_message, "retry_count": letter.retry_count,
                    "created_at": letter.created_at, "failed_at": letter.failed_at,
                    "payload_text": letter.payload.decode()})
    return out


async def schema_snapshot(db: asyncpg.Connection) -> dict[str, str]:
    """Digests of every table and sequence of schema `queen`, for "a refusal changes nothing".

    Left out: what a running deployment changes on its own while the test runs. That is the
    counters and heartbeats web workers flush (`stats_*`) and the ephemeral tables, whose
    leases, TTLs and idle queues every broker's sweeper expires in the background
    (core/ephemeral/sweeper.py); a lease left by an earlier test expiring mid-test changed
    `eph_lease` under a KV refusal in CI. No KV, lock or timer route writes an `eph_` table.
    Left out too: `kafka_nodes`, where every running Kafka listener (tests/kafka's session
    listener among them) records each second that it is alive; no HTTP route writes it.
    With the suite spread over pytest-xdist workers, a worker may have started that listener
    before it runs a refusal test."""
    relations = await db.fetch(
        "SELECT c.relname, c.relkind::text AS kind FROM pg_class c JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = 'queen' AND c.relkind IN ('r', 'S') "
        "AND c.relname NOT LIKE 'stats\\_%' AND c.relname NOT LIKE 'eph\\_%' "
        "AND c.relname <> 'kafka_nodes' "
        "ORDER BY c.relname")
    out: dict[str, str] = {}
    for rel in relations:
        name = rel["relname"]
        if rel["kind"] == "S":
            out[name] = str(await db.fetchval(f"SELECT last_value FROM queen.{name}"))
        else:
            out[name] = str(await db.fetchval(
                f"SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, '|' "
                f"ORDER BY t::text)), '') FROM queen.{name} t"))
    return out


def core_reader(db: Database) -> Reader:
    """The read path of a process that hears every notification (none is lost: its lanes,
    once seeded, stay trusted), without its listener: what it knows comes from its own
    claims and seeds. Several of them over one database behave as several processes."""
    from core.engine.ready.reader import Reader
    from core.engine.ready.ready_set import ReadySet

    return Reader(db, ReadySet(db, lambda: 1))


async def pop_all_after(reader: Reader, request: PopRequest, *, ready_at: float,
                        expected: int) -> int:
    """Wait until `ready_at` (monotonic), when held-back messages become deliverable, then
    pop until `expected` messages came (a lane offers only its cap of partitions at a time);
    answer how many came."""
    await asyncio.sleep(max(0.0, ready_at - time.monotonic()))
    got = 0
    for _ in range(expected):
        got += (await reader.pop(request)).count
        if got == expected:
            break
    return got


async def core_pop(db: Database, request: PopRequest) -> PopResult:
    """One pop by a process that starts now: it seeds its lane, then claims."""
    return await core_reader(db).pop(request)


async def commits_wait_for_a_standby(dsn: str, conn: asyncpg.Connection) -> None:
    """Until a commit on `dsn`'s server waits for the synchronous standby, after
    `synchronous_standby_names` was set and reloaded. A backend applies a reload itself, but
    whether commits wait is read from the checkpointer's copy of that setting, which the
    checkpointer updates when it gets to the reload: until then a commit is answered at once
    (on a loaded machine, the request a test sends next). A probe's commit that waits is
    cancelled (PostgreSQL keeps it); `conn` watches it."""
    probe = await asyncpg.connect(dsn)
    try:
        pid = probe.get_server_pid()

        async def a_commit_waits() -> bool:
            # A commit that wrote WAL (a temporary table's catalog rows): one that wrote
            # none never waits for a standby.
            commit = asyncio.ensure_future(probe.execute(
                "BEGIN; CREATE TEMPORARY TABLE sync_probe (a int) ON COMMIT DROP; COMMIT"))
            deadline = time.monotonic() + 1.0
            while not commit.done() and time.monotonic() < deadline:
                if await conn.fetchval("SELECT wait_event = 'SyncRep' FROM pg_stat_activity"
                                       " WHERE pid = $1", pid):
                    await conn.execute("SELECT pg_cancel_backend($1::integer)", pid)
                    await commit
                    return True
                await asyncio.sleep(0.02)
            await commit
            return False
        await wait_for(a_commit_waits, timeout=30)
    finally:
        await probe.close()
