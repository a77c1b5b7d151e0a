"""The reaper: lease expiry, transactionId-index pruning, retention; concurrency and restarts.

Time is controlled by back-dating rows in SQL. Steps are called in-process (core.upkeep.maintenance)
where a deterministic count matters, and through a real `python -m core.reaper` process where
the process itself is under test.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess

import asyncpg
import httpx

from core.embedded import stop_process
from core.engine.listener import WakeupHub
from core.engine.wakeup import CHANNEL as WAKEUP_CHANNEL
from core.settings import Settings
from core.storage.database import Database
from core.timers.firer import CHANNEL as TIMERS_CHANNEL
from core.upkeep import maintenance
from tests.support import ROOT, BrokerProcess, create_database, wait_for


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (its SigCgt mask in /proc)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def start_reaper(database_url: str, **env: str) -> subprocess.Popen[bytes]:
    import os
    import sys

    return subprocess.Popen(
        [sys.executable, "-m", "core.reaper"], cwd=ROOT, start_new_session=True,
        env={**os.environ, "DATABASE_URL": database_url, "LOG_LEVEL": "warning",
             "REAPER_INTERVAL_MS": "50", "RETENTION_INTERVAL": "100", **env})


async def push(http: httpx.AsyncClient, queue: str, n: int, *, partition: str = "Default",
               prefix: str = "t") -> None:
    """n messages, one push each, so each lands in its own segment."""
    for i in range(n):
        r = await http.post("/api/v1/push", json={"items": [
            {"queue": queue, "partition": partition, "payload": {"i": i},
             "transactionId": f"{prefix}{i}"}]})
        assert r.status_code == 201 and r.json()[0]["status"] == "queued", r.text


async def partition_id(db: asyncpg.Connection, queue: str, partition: str = "Default") -> int:
    pid = await db.fetchval(
        "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id"
        " WHERE q.name = $1 AND p.name = $2", queue, partition)
    assert pid is not None
    return int(pid)


async def lease_expired_rows(db: asyncpg.Connection, pid: int, groups: list[str]) -> None:
    """Cursors on `pid` holding a lease that expired a second ago."""
    await db.executemany(
        "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed, batch_end,"
        " worker_id, lease_expires_at, retry_count) VALUES ($1, $2, -1, 0, 'w-' || $2,"
        " now() - interval '1 second', 2)", [(pid, g) for g in groups])


async def lease_fields(db: asyncpg.Connection, pid: int) -> list[asyncpg.Record]:
    return await db.fetch(
        "SELECT consumer_group, batch_end, worker_id, lease_expires_at, retry_count, committed"
        " FROM queen.log_consumers WHERE partition_id = $1 ORDER BY consumer_group", pid)


async def test_reaper_process_expires_a_back_dated_lease_and_the_span_is_poppable_again(
        http: httpx.AsyncClient, db: asyncpg.Connection, database_url: str,
        queue_name: str) -> None:
    await push(http, queue_name, 2)
    r = await http.get(f"/api/v1/pop/queue/{queue_name}", params={"batch": 2})
    assert r.status_code == 200 and len(r.json()["messages"]) == 2
    pid = await partition_id(db, queue_name)
    [row] = await lease_fields(db, pid)
    assert row["worker_id"] == r.json()["leaseId"] and row["batch_end"] == 1
    await db.execute("UPDATE queen.log_consumers SET lease_expires_at = now() - interval '1 s'"
                     " WHERE partition_id = $1", pid)
    reaper = start_reaper(database_url)
    try:
        async def cleared() -> bool:
            [row] = await lease_fields(db, pid)
            return row["worker_id"] is None
        await wait_for(cleared, timeout=15)
    finally:
        stop_process(reaper, signal.SIGTERM, timeout=10)
    assert reaper.returncode == 0  # SIGTERM is a clean stop
    [row] = await lease_fields(db, pid)
    assert (row["batch_end"], row["worker_id"], row["lease_expires_at"]) == (None, None, None)
    assert row["committed"] == -1  # expiry moves no cursor
    r = await http.get(f"/api/v1/pop/queue/{queue_name}", params={"batch": 2})
    assert [m["data"]["i"] for m in r.json()["messages"]] == [0, 1]


async def test_expiry_leaves_live_leases_alone_and_keeps_the_retry_count(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    await push(http, queue_name, 1)
    pid = await partition_id(db, queue_name)
    await lease_expired_rows(db, pid, ["expired"])
    await db.execute(
        "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed, batch_end,"
        " worker_id, lease_expires_at) VALUES ($1, 'live', -1, 0, 'w-live',"
        " now() + interval '1 minute')", pid)
    assert await maintenance.expire_leases(core_db) >= 1
    rows = {r["consumer_group"]: r for r in await lease_fields(db, pid)}
    assert rows["expired"]["worker_id"] is None and rows["expired"]["retry_count"] == 2
    assert rows["live"]["worker_id"] == "w-live" and rows["live"]["batch_end"] == 0


async def test_two_reapers_at_once_release_each_lease_exactly_once(
        pg_server_url: str) -> None:
    # A database of its own: in the session's shared one, another test's short lease can
    # expire between the count and the reapers' pass, and they rightly release it too.
    url = await create_database(pg_server_url)
    db = await asyncpg.connect(url)
    try:
        queue_id = await db.fetchval("INSERT INTO queen.queues (name) VALUES ('reap2')"
                                     " RETURNING id")
        pid = await db.fetchval("INSERT INTO queen.log_partitions (queue_id, name)"
                                " VALUES ($1, 'Default') RETURNING id", queue_id)
        groups = [f"g{i}" for i in range(120)]
        await lease_expired_rows(db, pid, groups)
        dbs = [await Database.open(Settings(db_pool_size=2), url, migrate=False)
               for _ in range(2)]
        try:
            counts = await asyncio.gather(*(maintenance.expire_leases(d, batch=7) for d in dbs))
        finally:
            for d in dbs:
                await d.close()
        assert sum(counts) == len(groups), counts
        assert all(r["worker_id"] is None and r["lease_expires_at"] is None
                   for r in await lease_fields(db, pid))
    finally:
        await db.close()


async def test_two_reapers_at_once_delete_each_retained_segment_once(
        http: httpx.AsyncClient, db: asyncpg.Connection, database_url: str,
        queue_name: str) -> None:
    await http.post("/api/v1/configure", json={
        "queue": queue_name, "options": {"retentionSeconds": 60, "retentionEnabled": True}})
    await push(http, queue_name, 30)
    pid = await partition_id(db, queue_name)
    await db.execute("UPDATE queen.log_segments SET created_at = created_at - interval '1 hour'"
                     " WHERE partition_id = $1 AND base_offset < 20", pid)
    dbs = [await Database.open(Settings(db_pool_size=2), database_url, migrate=False)
           for _ in range(2)]
    try:
        results = await asyncio.gather(*(maintenance.apply_retention(d, segment_batch=3)
                                         for d in dbs))
    finally:
        for d in dbs:
            await d.close()
    # Other queues may have retention on too; count only this partition through log_start.
    assert await db.fetchval("SELECT log_start FROM queen.log_partitions WHERE id = $1", pid) == 20
    assert await db.fetchval(
        "SELECT count(*) FROM queen.log_segments WHERE partition_id = $1", pid) == 10
    assert sum(r[0] for r in results) >= 20


async def test_reaper_killed_and_restarted_loses_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, database_url: str,
        queue_name: str) -> None:
    await push(http, queue_name, 3)
    pid = await partition_id(db, queue_name)
    reaper = start_reaper(database_url)
    await asyncio.sleep(0.5)  # let it start and run a few passes
    reaper.send_signal(signal.SIGKILL)
    reaper.wait(timeout=10)
    await lease_expired_rows(db, pid, ["a", "b"])
    reaper = start_reaper(database_url)
    try:
        async def cleared() -> bool:
            return all(r["worker_id"] is None for r in await lease_fields(db, pid))
        await wait_for(cleared, timeout=15)
    finally:
        stop_process(reaper, signal.SIGTERM, timeout=10)
    r = await http.post("/api/v1/fetch", json={"entries": [{"queue": queue_name, "offset": 0}]})
    assert [rec["payload"]["i"] for rec in r.json()["entries"][0]["records"]] == [0, 1, 2]


async def test_reaper_waits_for_the_database_and_stops_on_sigterm(database_url: str) -> None:
    # An unreachable server: the reaper keeps waiting instead of exiting, and SIGTERM ends it.
    # Wait until it catches SIGTERM (its handler is installed before it first tries the
    # database): a fixed sleep raced start-up on a loaded machine and killed it with -15.
    reaper = start_reaper("postgresql://nobody@127.0.0.1:1/none")
    for _ in range(300):
        if catches_sigterm(reaper.pid) or reaper.poll() is not None:
            break
        await asyncio.sleep(0.1)
    assert catches_sigterm(reaper.pid)
    await asyncio.sleep(0.5)
    assert reaper.poll() is None
    stop_process(reaper, signal.SIGTERM, timeout=10)
    assert reaper.returncode == 0


async def test_the_reapers_hub_hears_its_parts_channels_and_not_the_wake_ups(
        database_url: str) -> None:
    """No pop parks in the reaper: its LISTEN connection listens to its parts' channels (the
    timer firer's) only, since a session listening on the wake-up channel costs the
    database about twice as much per NOTIFY as one reading past it. A wake-up sent before a
    timer notification, in the same transaction, has not reached the hub when that has."""
    hub = WakeupHub(database_url, {}, hears_wakeups=False)
    heard: list[str | None] = []
    marked: list[int] = []
    hub.subscribe(TIMERS_CHANNEL, heard.append)
    hub.on_marks = lambda queue_id, partitions, complete: marked.append(queue_id)
    listening = asyncio.create_task(hub.listen_forever())
    conn = await asyncpg.connect(database_url)
    try:
        async def ready() -> bool:
            return hub.listening
        await wait_for(ready, timeout=15)
        await conn.execute(f"SELECT pg_notify('{WAKEUP_CHANNEL}', '7:1'),"
                           f"       pg_notify('{TIMERS_CHANNEL}', '250')")

        async def timer_heard() -> bool:
            return "250" in heard
        await wait_for(timer_heard, timeout=15)
    finally:
        hub.close()
        await listening
        await conn.close()
    assert marked == []


async def test_index_pruning_respects_each_queues_dedup_window(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    wide, off = queue_name + "-wide", queue_name + "-off"
    await http.post("/api/v1/configure", json={"queue": wide,
                                               "options": {"dedupWindowSeconds": 7200}})
    await http.post("/api/v1/configure", json={"queue": off,
                                               "options": {"dedupWindowSeconds": 0}})
    for q in (wide, off):
        await push(http, q, 3)
    ages = {0: 9000, 1: 5000, 2: 0}  # seconds to back-date the row of offset i
    for q in (wide, off):
        pid = await partition_id(db, q)
        for offset, age in ages.items():
            await db.execute(
                "UPDATE queen.log_txn_index SET created_at = created_at - make_interval("
                "secs => $3) WHERE partition_id = $1 AND msg_offset = $2", pid, offset, age)
    await maintenance.prune_txn_index(core_db)

    async def offsets(q: str) -> list[int]:
        pid = await partition_id(db, q)
        return [r["msg_offset"] for r in await db.fetch(
            "SELECT msg_offset FROM queen.log_txn_index WHERE partition_id = $1"
            " ORDER BY msg_offset", pid)]
    assert await offsets(wide) == [1, 2]  # 7200 s window: 9000 s old goes, 5000 s stays
    assert await offsets(off) == [2]      # dedup off: the 1 h floor applies
    # Pruned means outside the window: the same transactionId is a new message again.
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": wide, "payload": 1, "transactionId": "t0"},
        {"queue": wide, "payload": 1, "transactionId": "t1"}]})
    assert [e["status"] for e in r.json()] == ["queued", "duplicate"]


async def test_retention_deletes_whole_old_segments_and_advances_log_start(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    await http.post("/api/v1/configure", json={
        "queue": queue_name, "options": {"retentionSeconds": 60, "retentionEnabled": True}})
    await push(http, queue_name, 4)
    pid = await partition_id(db, queue_name)
    await db.execute("UPDATE queen.log_segments SET created_at = created_at - interval '2 min'"
                     " WHERE partition_id = $1 AND base_offset < 2", pid)
    await maintenance.apply_retention(core_db, segment_batch=100)
    assert [r["base_offset"] for r in await db.fetch(
        "SELECT base_offset FROM queen.log_segments WHERE partition_id = $1"
        " ORDER BY base_offset", pid)] == [2, 3]
    r = await http.post("/api/v1/fetch", json={"entries": [{"queue": queue_name, "offset": 0}]})
    entry = r.json()["entries"][0]
    assert entry["error"] == "OFFSET_OUT_OF_RANGE" and entry["logStartOffset"] == 2
    r = await http.post("/api/v1/fetch", json={"entries": [{"queue": queue_name, "offset": 2}]})
    assert [rec["payload"]["i"] for rec in r.json()["entries"][0]["records"]] == [2, 3]
    # Everything old: log_start moves past the last offset and the log reads as empty.
    await db.execute("UPDATE queen.log_segments SET created_at = created_at - interval '2 min'"
                     " WHERE partition_id = $1", pid)
    await maintenance.apply_retention(core_db, segment_batch=100)
    assert await db.fetchval("SELECT log_start FROM queen.log_partitions WHERE id = $1", pid) == 4
    r = await http.post("/api/v1/fetch", json={"entries": [{"queue": queue_name, "offset": 4}]})
    assert r.json()["entries"][0]["records"] == []


async def test_completed_retention_waits_for_every_group(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    await http.post("/api/v1/configure", json={"queue": queue_name,
                                               "options": {"completedRetentionSeconds": 60,
                                                           "retentionEnabled": True}})
    await push(http, queue_name, 4)
    pid = await partition_id(db, queue_name)
    await db.execute("UPDATE queen.log_segments SET created_at = created_at - interval '2 min'"
                     " WHERE partition_id = $1", pid)
    await maintenance.apply_retention(core_db, segment_batch=100)
    log_start = "SELECT log_start FROM queen.log_partitions WHERE id = $1"
    assert await db.fetchval(log_start, pid) == 0  # no consumer yet: nothing is "completed"
    await db.execute("INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)"
                     " VALUES ($1, 'fast', 3), ($1, 'slow', 1)", pid)
    await maintenance.apply_retention(core_db, segment_batch=100)
    assert await db.fetchval(log_start, pid) == 2  # the slow group has committed offset 1
    await db.execute("UPDATE queen.log_consumers SET committed = 3 WHERE partition_id = $1", pid)
    await maintenance.apply_retention(core_db, segment_batch=100)
    assert await db.fetchval(log_start, pid) == 4


async def test_serve_style_reaper_runs_retention_on_its_cadence(
        http: httpx.AsyncClient, db: asyncpg.Connection, database_url: str,
        queue_name: str) -> None:
    await http.post("/api/v1/configure", json={
        "queue": queue_name, "options": {"retentionSeconds": 30, "retentionEnabled": True}})
    await push(http, queue_name, 2)
    pid = await partition_id(db, queue_name)
    await db.execute("UPDATE queen.log_segments SET created_at = created_at - interval '1 min'"
                     " WHERE partition_id = $1 AND base_offset = 0", pid)
    with BrokerProcess(database_url, workers=1, reaper=True,
                       env={"REAPER_INTERVAL_MS": "50", "RETENTION_INTERVAL": "100"}):
        async def trimmed() -> bool:
            return await db.fetchval(
                "SELECT log_start FROM queen.log_partitions WHERE id = $1", pid) == 1
        await wait_for(trimmed, timeout=15)
