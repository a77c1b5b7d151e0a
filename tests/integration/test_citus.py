"""The log on a Citus cluster (issue 35): every statement of the hot path runs on one shard
and commits in one phase, commits on any node wake pops everywhere, and a broker routes from
the nodes its DATABASE_URL names.

What each operation sent is read from Citus itself, on every node: `citus_stat_counters`
counts the statements a node planned on one shard and on several, and `pg_dist_transaction`
keeps one row per two-phase commit a node coordinated (the test cluster never recovers them
away: tests/citus_cluster.py). Skipped, with the reason, without QUEEN_CITUS_BIN.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import psutil
import pytest

from core.admin.dlq import DeadLetters, ReplayedLetter
from core.engine.directory import PartitionName
from core.engine.wakeup import CHANNEL, CLAIMED_CHANNEL, Wake
from core.engine.writes import NewMessage, append
from core.ids import PartitionId, uuid7
from core.options import POP_MAX_BYTES
from core.settings import Settings
from core.storage import reads, stats
from core.storage.database import Database
from core.storage.shards import ShardMap
from core.storage.statements import Statement
from core.streams.cycle import Cycle, CycleAck, CyclePush, CycleResult, StateOp
from core.streams.service import Streams
from core.tenancy.service import Tenants
from core.tenancy.settings import TenancySettings
from core.upkeep import maintenance
from core.waiting import within
from tests.citus_cluster import SHARDS, SKIP_REASON, TestCluster, citus_bin
from tests.support import (
    BrokerProcess,
    commits_wait_for_a_standby,
    pop_json,
    push_items,
    wait_for,
)

pytestmark = pytest.mark.skipif(citus_bin() is None, reason=SKIP_REASON)

PARTITIONS = 12
ROUNDS = 5


@dataclass(frozen=True)
class Counts:
    single: int  # statements planned on one shard, all nodes
    multi: int  # statements planned on several shards, all nodes
    two_phase: int  # two-phase commits coordinated, all nodes


@pytest.fixture(scope="module")
async def url(citus_cluster: TestCluster) -> str:
    return await citus_cluster.database()


@pytest.fixture(scope="module")
def broker(url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    log = tmp_path_factory.mktemp("citus-broker") / "broker.log"
    with BrokerProcess(url, workers=2, log_path=log) as proc:
        yield proc


@pytest.fixture
async def http(broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as client:
        yield client


def _database(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


async def counts(cluster: TestCluster, url: str) -> Counts:
    single = multi = two_phase = 0
    for node in cluster.cluster.nodes:
        conn = await asyncpg.connect(node.dsn(_database(url)))
        try:
            row = await conn.fetchrow(
                "SELECT query_execution_single_shard, query_execution_multi_shard"
                "  FROM citus_stat_counters WHERE name = current_database()")
            assert row is not None
            single += row[0]
            multi += row[1]
            two_phase += await conn.fetchval("SELECT count(*) FROM pg_dist_transaction")
        finally:
            await conn.close()
    return Counts(single, multi, two_phase)


def _since(before: Counts, after: Counts) -> Counts:
    return Counts(after.single - before.single, after.multi - before.multi,
                  after.two_phase - before.two_phase)


async def test_the_broker_hashes_partition_ids_as_citus_does(url: str) -> None:
    """The shard the broker groups a partition's statements by is the one Citus keeps its
    rows on (core/storage/shards.py reimplements PostgreSQL's hash of bigint)."""
    conn = await asyncpg.connect(url)
    try:
        shards = await ShardMap.read(conn)
        ids = [0, 1, -1, 2**31, 2**48 + 5, 2**62, -(2**63), 2**63 - 1, *range(2, 400, 7)]
        rows = await conn.fetch(
            "SELECT v, get_shard_id_for_distribution_column('queen.log_partitions', v) AS s"
            "  FROM unnest($1::bigint[]) v", ids)
        by_range = [r[0] for r in await conn.fetch(
            "SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'queen.log_partitions'"
            "::regclass ORDER BY shardminvalue::integer")]
    finally:
        await conn.close()
    assert shards.distributed and shards.count == len(by_range)
    assert [by_range[shards.shard_of(r["v"])] for r in rows] == [r["s"] for r in rows]
    assert [shards.shard_of(route) for route in shards.routes] == list(range(shards.count))


async def test_push_pop_ack_extend_and_fetch_run_on_one_shard_in_one_phase(
        citus_cluster: TestCluster, url: str, http: httpx.AsyncClient) -> None:
    """After a queue's partitions and its group exist (creating them writes the reference
    tables on every node: two-phase), the hot path plans no statement over several shards
    and commits nothing in two phases, whichever shards its partitions are on."""
    queue = "q-" + uuid.uuid4().hex[:10]
    names = [f"p{i}" for i in range(PARTITIONS)]
    for name in names:  # the partitions, and a first pop that registers the group
        await push_items(http, queue, ["warm"], partition=name, prefix=f"w-{name}-")
    body = await pop_json(http, queue, consumerGroup="g", batch=1000, partitions=PARTITIONS)
    assert body is not None
    await _ack(http, body, "g")
    while (body := await pop_json(http, queue, consumerGroup="g", batch=1000,
                                  partitions=PARTITIONS)) is not None:
        await _ack(http, body, "g")

    per_op: dict[str, Counts] = {}
    popped: list[dict] = []  # type: ignore[type-arg]
    for op in ("push", "pop", "extend", "ack", "fetch"):
        before = await counts(citus_cluster, url)
        for i in range(ROUNDS):
            if op == "push":
                r = await http.post("/api/v1/push", json={"items": [
                    {"queue": queue, "partition": name, "payload": {"i": i},
                     "transactionId": f"{name}-{i}"} for name in names]})
                assert r.status_code == 201 and {e["status"] for e in r.json()} == {"queued"}
            elif op == "pop":
                body = await pop_json(http, queue, consumerGroup="g", batch=3, partitions=3)
                assert body is not None
                popped.append(body)
            elif op == "extend":
                r = await http.post(f"/api/v1/lease/{popped[i]['leaseId']}/extend",
                                    content=b"")
                assert r.status_code == 200 and r.json()["success"], r.text
            elif op == "ack":
                await _ack(http, popped[i], "g")
            else:
                r = await http.post("/api/v1/fetch", json={"entries": [
                    {"queue": queue, "partition": names[i], "offset": 0}]})
                assert r.status_code == 200 and r.json()["entries"][0]["records"], r.text
        per_op[op] = _since(before, await counts(citus_cluster, url))
    print({op: (c.single / ROUNDS, c.multi, c.two_phase) for op, c in per_op.items()})
    assert {op: c.multi for op, c in per_op.items()} == dict.fromkeys(per_op, 0)
    assert {op: c.two_phase for op, c in per_op.items()} == dict.fromkeys(per_op, 0)
    assert all(c.single > 0 for c in per_op.values())  # the counters do count


async def forwards(cluster: TestCluster, url: str) -> dict[str, int]:
    """Per worker, how many times it used a connection to another node (Citus counts every
    connection it opens or reuses for a remote call: a call it forwarded to the node of its
    shard, or a statement it ran on another node's shard)."""
    out = {}
    for node in cluster.cluster.workers:
        conn = await asyncpg.connect(node.dsn(_database(url)))
        try:
            out[node.name] = int(await conn.fetchval(
                "SELECT connection_establishment_succeeded + connection_reused"
                "  FROM citus_stat_counters WHERE name = current_database()") or 0)
        finally:
            await conn.close()
    return out


async def test_push_pop_extend_and_ack_go_straight_to_the_node_of_their_shard(
        citus_cluster: TestCluster, url: str, http: httpx.AsyncClient) -> None:
    """Each routed call is sent on a connection to the node holding its shard
    (core/storage/placement.py), so no worker forwards one: over pushes, pops, extensions
    and acks of partitions on both workers, no worker opens or reuses a connection to
    another node. (Spread over the workers, about half the calls were forwarded.) A pop
    takes one partition here: an ack of a pop over several shards is a call without a
    route, which needs the other node when its partitions are on both."""
    queue = "q-" + uuid.uuid4().hex[:10]
    names = [f"p{i}" for i in range(PARTITIONS)]
    for name in names:  # the partitions and the group exist (that writes every node)
        await push_items(http, queue, ["warm"], partition=name, prefix=f"w-{name}-")
    while (body := await pop_json(http, queue, consumerGroup="g", batch=1000,
                                  partitions=PARTITIONS)) is not None:
        await _ack(http, body, "g")
    conn = await asyncpg.connect(url)
    try:  # the partitions are on both workers
        nodes = {r[0] for r in await conn.fetch(
            "SELECT sp.nodeport FROM queen.partition_directory d"
            "  JOIN queen.queues q ON q.id = d.queue_id"
            "  JOIN pg_dist_shard_placement sp"
            "    ON sp.shardid = get_shard_id_for_distribution_column("
            "                    'queen.log_partitions', d.partition_id)"
            " WHERE q.name = $1", queue)}
    finally:
        await conn.close()
    assert nodes == {w.port for w in citus_cluster.cluster.workers}

    before = await forwards(citus_cluster, url)
    popped = 0
    for i in range(ROUNDS):
        r = await http.post("/api/v1/push", json={"items": [
            {"queue": queue, "partition": name, "payload": {"i": i},
             "transactionId": f"{name}-{i}"} for name in names]})
        assert r.status_code == 201 and {e["status"] for e in r.json()} == {"queued"}
        for _ in range(4):
            body = await pop_json(http, queue, consumerGroup="g", batch=3, partitions=1)
            assert body is not None
            popped += len(body["messages"])
            r = await http.post(f"/api/v1/lease/{body['leaseId']}/extend", content=b"")
            assert r.status_code == 200 and r.json()["success"], r.text
            await _ack(http, body, "g")
    after = await forwards(citus_cluster, url)
    assert popped >= ROUNDS * 4
    assert {w: after[w] - before[w] for w in after} == dict.fromkeys(after, 0)


async def _ack(http: httpx.AsyncClient, body: dict, group: str) -> None:  # type: ignore[type-arg]
    r = await http.post("/api/v1/ack/batch", json={"consumerGroup": group, "acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "leaseId": m["leaseId"], "status": "completed"} for m in body["messages"]]})
    assert r.status_code == 200 and all(a["success"] for a in r.json()), r.text


async def test_the_reaper_releases_expired_leases_one_shard_at_a_time(
        citus_cluster: TestCluster, url: str, http: httpx.AsyncClient) -> None:
    """Expired leases on several shards: one read of every shard finds them, and one call per
    shard releases them; nothing commits in two phases."""
    queue = "q-" + uuid.uuid4().hex[:10]
    for name in ("a", "b", "c", "d"):
        await push_items(http, queue, ["x"], partition=name, prefix=f"{name}-")
    body = await pop_json(http, queue, batch=10, partitions=4, leaseSeconds=1)
    assert body is not None and len({m["partitionId"] for m in body["messages"]}) == 4
    db = await Database.open(Settings(db_pool_size=2), url, migrate=False)
    try:
        await asyncio.sleep(1.2)
        before = await counts(citus_cluster, url)
        released = await maintenance.expire_leases(db)
        used = _since(before, await counts(citus_cluster, url))
    finally:
        await db.close()
    assert released == 4
    assert used.two_phase == 0
    # the reads: one for leases, one for retry delays (and again when a read came back full)
    assert used.multi == 2


async def test_counters_and_heartbeats_flush_on_the_coordinator(
        url: str, http: httpx.AsyncClient) -> None:
    """The statistics' counters stay on the coordinator and the partition directory is a
    reference table: the flush that drops deltas of unknown partitions runs there (Citus
    refused its first shape, an INSERT reading the directory with subqueries in RETURNING).
    Its write is a plain statement of the coordinator (no Citus node in its plan): read
    with the directory in one statement, it was planned in steps through intermediate
    results, five times its CPU, every second in every broker process."""
    queue = "q-" + uuid.uuid4().hex[:10]
    await push_items(http, queue, ["x"], partition="a", prefix="s-")
    process = "test-" + uuid.uuid4().hex[:8]
    conn = await asyncpg.connect(url)  # the first host: the coordinator
    try:
        pid = await conn.fetchval(
            "SELECT d.partition_id FROM queen.partition_directory d"
            "  JOIN queen.queues q ON q.id = d.queue_id WHERE q.name = $1", queue)
        first = await stats.flush(conn, partition_ids=[0, pid, 2**62],
                                  names=["requests", "push_messages", "push_messages"],
                                  deltas=[2, 3, 4], process=process, figures="{}",
                                  role="web")
        second = await stats.flush(conn, partition_ids=[0], names=["requests"], deltas=[1],
                                   process=process, figures="{}", role="web")
        kept = await conn.fetchval(
            "SELECT value FROM queen.stats_counters WHERE partition_id = $1"
            "   AND name = 'push_messages'", pid)
        beats = await conn.fetchval(
            "SELECT count(*) FROM queen.stats_processes WHERE process = $1", process)
        plan = "\n".join(r[0] for r in await conn.fetch(
            "EXPLAIN " + Statement.registry["stats_flush"].sql, [0, pid], ["requests"] * 2,
            [1, 1], process, "{}", "web"))
    finally:
        await conn.close()
    assert "Citus" not in plan, plan
    assert first.written == 2  # the unknown partition's delta is dropped
    assert second.written == 1 and second.requests >= first.requests + 2
    assert kept is not None and kept >= 3 and beats == 1


async def test_a_push_through_one_worker_wakes_a_pop_parked_on_a_broker_of_the_other(
        url: str) -> None:
    """LISTEN/NOTIFY is per node in Citus: a broker routing from worker 1 commits there, a
    broker routing from worker 2 has a pop parked. Each queue's notifications go to one
    worker, and every broker listens on every worker (core/engine/wake_nodes.py), so the
    pop is woken within the notification latency, and the coordinator, which every broker
    shares, raises and reads none of the log's notifications."""
    hosts = urlsplit(url).netloc.split(",")
    path = urlsplit(url).path
    assert len(hosts) == 3
    via = {w: f"postgresql://{hosts[0]},{hosts[w]}{path}" for w in (1, 2)}
    queue = "q-" + uuid.uuid4().hex[:10]
    on_coordinator: list[str] = []
    coordinator = await asyncpg.connect(f"postgresql://{hosts[0]}{path}")
    for channel in (CHANNEL, CLAIMED_CHANNEL):
        await coordinator.add_listener(
            channel, lambda _c, _pid, name, payload: on_coordinator.append(f"{name} {payload}"))
    try:
        await _wake_across_workers(hosts, path, via, queue)
        await coordinator.execute("SELECT 1")  # brings what was sent before
    finally:
        await coordinator.close()
    assert on_coordinator == []


async def _wake_across_workers(hosts: list[str], path: str, via: dict[int, str],
                               queue: str) -> None:
    with BrokerProcess(via[1], workers=1) as one, BrokerProcess(via[2], workers=1) as two:
        async with httpx.AsyncClient(base_url=one.url, timeout=30) as a, \
                httpx.AsyncClient(base_url=two.url, timeout=30) as b:
            await push_items(a, queue, ["first"], prefix="f")  # the queue exists for both
            assert (await pop_json(b, queue, batch=1, autoAck=True)) is not None
            parked = asyncio.create_task(b.get(f"/api/v1/pop/queue/{queue}", params={
                "wait": "true", "timeout": "20000", "batch": "1"}))
            await asyncio.sleep(1.0)
            sent = time.monotonic()
            await push_items(a, queue, ["woken"], prefix="w")
            answer = await parked
            waited = time.monotonic() - sent
        assert answer.status_code == 200, answer.text
        assert [m["data"] for m in answer.json()["messages"]] == ["woken"]
        assert waited < 2.0  # a notification, not a re-check
        # each broker's log connections went to its own worker
        for worker in (1, 2):
            conn = await asyncpg.connect(f"postgresql://postgres@{hosts[worker]}{path}")
            try:
                here = await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND application_name = 'queen-broker'")
            finally:
                await conn.close()
            assert here > 0, f"no broker connection on worker {worker}"


async def _partitions_on(url: str, queue: str, port: int) -> set[str]:
    """The ids of the queue's partitions whose shard lives on the worker at `port`."""
    conn = await asyncpg.connect(url)
    try:
        return {str(r[0]) for r in await conn.fetch(
            "SELECT d.partition_id FROM queen.partition_directory d"
            "  JOIN queen.queues q ON q.id = d.queue_id"
            "  JOIN pg_dist_shard_placement sp"
            "    ON sp.shardid = get_shard_id_for_distribution_column("
            "                    'queen.log_partitions', d.partition_id)"
            " WHERE q.name = $1 AND sp.nodeport = $2", queue, port)}
    finally:
        await conn.close()


def _signal_tree(pid: int | None, sig: int) -> None:
    """Signal a postmaster and every process under it (its backends)."""
    if pid is None:
        return
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)


async def test_an_ack_on_a_frozen_worker_answers_503_within_the_silence_timeout(
        citus_cluster: TestCluster, url: str, http: httpx.AsyncClient) -> None:
    """A worker frozen whole (SIGSTOP of its postmaster and backends: its kernel still
    acknowledges every packet, so no socket timeout fires): an ack of a message on it used
    to wait for as long as the worker was frozen (the statement timeout, 30 s, is the only
    bound). Each process now watches every worker as it watches the coordinator, cuts its
    connections to one silent for DB_SILENCE_TIMEOUT_MS (4 s) and answers 503; once the
    worker is back, the ack holds (sent again by the client as after any 503)."""
    queue = "q-" + uuid.uuid4().hex[:10]
    names = [f"p{i}" for i in range(PARTITIONS)]
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": n, "payload": n, "transactionId": n} for n in names]})
    assert r.status_code == 201, r.text
    worker = citus_cluster.cluster.workers[0]
    on_it = await _partitions_on(url, queue, worker.port)
    assert 0 < len(on_it) < PARTITIONS
    r = await http.get(f"/api/v1/pop/queue/{queue}", params={
        "wait": "false", "batch": "100", "partitions": str(PARTITIONS)})
    assert r.status_code == 200, r.text
    message = next(m for m in r.json()["messages"] if m["partitionId"] in on_it)
    ack = {"transactionId": message["transactionId"], "partitionId": message["partitionId"],
           "leaseId": message["leaseId"], "status": "completed"}
    pid = citus_cluster.cluster.postmaster_pid(worker)
    frozen_s = 9.0
    _signal_tree(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        r = await http.post("/api/v1/ack", json=ack, timeout=60)
        waited = time.monotonic() - started
    finally:
        await asyncio.sleep(max(0.0, frozen_s - (time.monotonic() - started)))
        _signal_tree(pid, signal.SIGCONT)
    assert r.status_code == 503 and r.headers.get("Retry-After"), (r.status_code, r.text)
    assert waited < 8.0, f"the ack waited {waited:.1f} s for the frozen worker"
    deadline = time.monotonic() + 30
    while True:  # the worker is back: the same ack is applied
        r = await http.post("/api/v1/ack", json=ack)
        if r.status_code != 503 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    # The ack cut at 503 may still have been applied: the frozen backend had its statement
    # and ran it when resumed. Then the lease is released and the same ack is refused;
    # either way the message is acknowledged once.
    assert r.status_code == 200, r.text
    [answer] = r.json()
    assert answer["success"] or answer["error"] == "invalid or expired lease", answer
    conn = await asyncpg.connect(url)
    try:
        committed = await conn.fetchval(
            "SELECT max(committed) FROM queen.log_consumers WHERE partition_id = $1",
            int(message["partitionId"]))
    finally:
        await conn.close()
    assert committed == 0  # the partition's one message (offset 0) is acknowledged


async def test_a_dead_worker_fails_only_its_partitions_and_holds_nothing_back_after(
        citus_cluster: TestCluster, url: str, http: httpx.AsyncClient,
        broker: BrokerProcess) -> None:
    """kill -9 of a worker's postmaster: pops still deliver what the partitions on the other
    worker hold, then answer 503 (not 204: the dead worker's partitions could not be looked
    at); once it is back, what it holds is delivered at once: no candidate stays held by a
    pop that failed on the dead shard. The broker logs no traceback meanwhile (a node's pool
    keeps no connection floor that asyncpg would retry, with a traceback each time)."""
    queue = "q-" + uuid.uuid4().hex[:10]
    names = [f"p{i}" for i in range(PARTITIONS)]
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": n, "payload": n, "transactionId": n} for n in names]})
    assert r.status_code == 201 and {e["status"] for e in r.json()} == {"queued"}, r.text
    worker = citus_cluster.cluster.workers[0]
    on_it = await _partitions_on(url, queue, worker.port)  # the worker to kill
    assert 0 < len(on_it) < PARTITIONS
    delivered: dict[str, str] = {}
    statuses = []
    params = {"wait": "false", "batch": "100", "partitions": str(PARTITIONS),
              "autoAck": "true"}
    citus_cluster.cluster.kill(worker)
    try:
        for _ in range(6):
            r = await http.get(f"/api/v1/pop/queue/{queue}", params=params)
            statuses.append(r.status_code)
            if r.status_code == 503:
                assert r.headers.get("Retry-After"), r.headers
            if r.status_code == 200:
                delivered.update({m["partitionId"]: m["data"] for m in r.json()["messages"]})
    finally:
        citus_cluster.cluster.start(worker)
    assert delivered and not set(delivered) & on_it  # the live worker's, only
    assert len(delivered) == PARTITIONS - len(on_it)
    assert set(statuses) <= {200, 503} and 503 in statuses
    started = time.monotonic()
    while len(delivered) < PARTITIONS and time.monotonic() - started < 20:
        r = await http.get(f"/api/v1/pop/queue/{queue}", params=params)
        if r.status_code == 200:
            delivered.update({m["partitionId"]: m["data"] for m in r.json()["messages"]})
    assert sorted(delivered.values()) == sorted(names)
    assert time.monotonic() - started < 5.0  # no pop waited out candidates held back
    assert broker.log_path is not None
    logged = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in logged, logged[-3000:]


async def test_the_first_statements_after_a_worker_restart_are_sent_again(
        citus_cluster: TestCluster, url: str) -> None:
    """kill -9 of a worker's postmaster, then a restart: each backend of the other nodes
    keeps its cached connection to the restarted worker, and the first statement that uses
    it may fail (XX000 'failure on connection marked as essential'), here creating a queue,
    which writes the reference tables on every node. The statement rolled back whole, and
    the backend has dropped the dead connection, so the broker sends it again: pushes and
    pops right after the restart are served (before: 503).

    Citus writes a reference table's placements in the order of their nodes' ports. The
    failure came every time the dead worker's placement was the first one written (4 runs of
    4) and never when it came after another's (3 of 3; Citus then connected again): so a
    broker of its own sends the log's statements to the coordinator, and the worker killed
    is the one with the lower port."""
    hosts = urlsplit(url).netloc.split(",")
    path = urlsplit(url).path
    worker = min(citus_cluster.cluster.workers, key=lambda w: w.port)

    async def round_(http: httpx.AsyncClient) -> tuple[int, int | str]:
        """A push to a new queue's partitions and a pop of them all: the push's status and
        the number of messages popped (or the error)."""
        queue = "q-" + uuid.uuid4().hex[:10]
        r = await http.post("/api/v1/push", json={"items": [
            {"queue": queue, "partition": f"p{i}", "payload": i, "transactionId": f"t{i}"}
            for i in range(4)]})
        if r.status_code != 201:
            return r.status_code, r.text
        r = await http.get(f"/api/v1/pop/queue/{queue}", params={
            "wait": "false", "batch": "10", "partitions": "4", "autoAck": "true"})
        return 201, (len(r.json()["messages"]) if r.status_code == 200 else r.text)

    with BrokerProcess(f"postgresql://{hosts[0]}{path}", workers=1) as proc:
        async with httpx.AsyncClient(base_url=proc.url, timeout=30) as http:
            # at once: several connections, each of which has written on the worker to kill
            warm = await asyncio.gather(*(round_(http) for _ in range(6)))
            assert set(warm) == {(201, 4)}, warm
            citus_cluster.cluster.kill(worker)
            citus_cluster.cluster.start(worker)
            after = await asyncio.gather(*(round_(http) for _ in range(6)))
            assert set(after) == {(201, 4)}, after


async def test_pushes_to_the_live_worker_go_on_while_another_worker_is_dead(
        citus_cluster: TestCluster, url: str, http: httpx.AsyncClient) -> None:
    """kill -9 of a worker's postmaster: a push's items for partitions on the dead worker fail
    (`failed`, to be sent again), the others are written; later pushes to the live worker's
    partitions are written and delivered at once. Before, the failed items went to the push
    spool and the broker took the database for down, so every later push, to any node, was
    spooled behind them and delivered only once the dead worker was back."""
    queue = "q-" + uuid.uuid4().hex[:10]
    names = [f"p{i}" for i in range(PARTITIONS)]

    async def push(partitions: Iterable[str], round_: int) -> list[dict[str, Any]]:
        r = await http.post("/api/v1/push", json={"items": [
            {"queue": queue, "partition": n, "payload": n, "transactionId": f"{n}-{round_}"}
            for n in partitions]})
        assert r.status_code == 201, r.text
        return list(r.json())

    # Earlier tests restarted workers: the first uses of the connections the nodes kept to
    # them fail, and are sent again (test_the_first_statements_after_a_worker_restart_...)
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": n, "payload": n, "transactionId": f"{n}-0"}
        for n in names]})
    assert r.status_code == 201 and {e["status"] for e in r.json()} == {"queued"}, r.text
    worker = citus_cluster.cluster.workers[0]
    dead_ids = await _partitions_on(url, queue, worker.port)
    assert 0 < len(dead_ids) < PARTITIONS
    r = await http.get(f"/api/v1/pop/queue/{queue}", params={
        "wait": "false", "batch": "100", "partitions": str(PARTITIONS), "autoAck": "true"})
    assert r.status_code == 200 and len(r.json()["messages"]) == PARTITIONS, r.text
    by_id = {m["partitionId"]: m["data"] for m in r.json()["messages"]}
    live = [n for pid, n in by_id.items() if pid not in dead_ids]
    citus_cluster.cluster.kill(worker)
    try:
        first = await push(names, 1)
        failed = {e["transactionId"] for e in first if e["status"] == "failed"}
        assert failed == {f"{by_id[pid]}-1" for pid in dead_ids}, first
        assert {e["status"] for e in first if e["transactionId"] not in failed} == {"queued"}
        second = await push(live, 2)
        assert {e["status"] for e in second} == {"queued"}, second  # before: `buffered`
        got: set[str] = set()
        deadline = time.monotonic() + 10
        while len(got) < 2 * len(live) and time.monotonic() < deadline:
            r = await http.get(f"/api/v1/pop/queue/{queue}", params={
                "wait": "false", "batch": "100", "partitions": str(PARTITIONS),
                "autoAck": "true"})
            if r.status_code == 200:
                got |= {f'{m["data"]}-{m["transactionId"][-1]}' for m in r.json()["messages"]}
        assert got == {f"{n}-{k}" for n in live for k in (1, 2)}
    finally:
        citus_cluster.cluster.start(worker)


async def test_calls_on_a_node_a_shard_move_has_not_committed_on_yet_read_the_copy_they_write(
        citus_cluster: TestCluster) -> None:
    """A shard move's two-phase commit reaches the nodes one by one. Here the move from the
    source worker to the target has committed on the coordinator and the target, not yet on
    the source (its sessions of the move are stopped; a loaded machine does this for a
    moment). Pops, acks and a push go through the target, then a pop, an ack, a push, the
    reaper's release of an expired lease and an extension arrive at the source (a broker's map
    names the old node for up to 30 s). The source still believes the shard is its own, and
    Citus makes writes wait for a move, not reads: the claim read the cursor from the old
    copy, waited at its write, then wrote `committed = start - 1` on the new copy, so the
    cursor went back and acknowledged messages were delivered again (a fault run's
    redelivered_after_ack); the ack, read under a lease the old copy still held, was
    accepted and moved the cursor back too; the push read the partition's head from the old
    copy and wrote an offset the new copy had given out (503, duplicate key); the release
    found the old copy's lease expired and ended the live one of the new copy; the
    extension of a lease read the lease's row from the old copy, without the other shard
    its pop linked on the new copy, so the lease's part there was not extended. Each now
    takes the shard's placement lock before it reads (queen.hold_placement): it waits for
    the move there, then reads the copy it writes."""
    url = await citus_cluster.database()
    queue = "q-" + uuid.uuid4().hex[:10]
    names = [f"p{i}" for i in range(4 * SHARDS)]  # four of them share a shard
    cluster = citus_cluster.cluster
    database = _database(url)
    coordinator = await asyncpg.connect(cluster.coordinator.dsn(database))
    mover = await asyncpg.connect(cluster.coordinator.dsn(database))
    conns = [coordinator, mover]
    stopped: list[psutil.Process] = []
    commit: asyncio.Future[str] | None = None
    brokers = contextlib.ExitStack()
    try:
        # A broker per worker, each sending the log's calls to that worker only.
        via = {w.port: brokers.enter_context(BrokerProcess(
            f"postgresql://postgres@127.0.0.1:{cluster.coordinator.port},"
            f"127.0.0.1:{w.port}/{database}", workers=1)) for w in cluster.workers}
        clients = {port: brokers.enter_context(contextlib.closing(
            httpx.Client(base_url=b.url, timeout=60))) for port, b in via.items()}
        r = next(iter(clients.values())).post("/api/v1/push", json={"items": [
            {"queue": queue, "partition": n, "payload": i, "transactionId": f"{n}-{i}"}
            for n in names for i in range(6)]})
        assert r.status_code == 201, r.text
        by_shard: dict[int, list[tuple[int, str]]] = {}
        for row in await coordinator.fetch(
                "SELECT get_shard_id_for_distribution_column('queen.log_partitions',"
                "       d.partition_id) AS shard, d.partition_id, d.name"
                "  FROM queen.partition_directory d JOIN queen.queues q ON q.id = d.queue_id"
                " WHERE q.name = $1 ORDER BY d.partition_id", queue):
            by_shard.setdefault(row["shard"], []).append((row["partition_id"], row["name"]))
        shard, [(popped, p_name), (acked, a_name), (released, _), (spanned, _), *_] = next(
            (k, v) for k, v in by_shard.items() if len(v) >= 4)
        [(elsewhere, _), *_] = next(v for k, v in by_shard.items() if k != shard)
        shards = await ShardMap.read(coordinator)
        route, route_elsewhere = shards.route_of(popped), shards.route_of(elsewhere)
        port = await coordinator.fetchval(
            "SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $1", shard)
        source = next(w for w in cluster.workers if w.port == port)
        target = next(w for w in cluster.workers if w.port != port)
        on_source = await asyncpg.connect(source.dsn(database))
        on_target = await asyncpg.connect(target.dsn(database))
        late_pop_conn = await asyncpg.connect(source.dsn(database))
        late_ack_conn = await asyncpg.connect(source.dsn(database))
        late_release_conn = await asyncpg.connect(source.dsn(database))
        late_extend_conn = await asyncpg.connect(source.dsn(database))
        conns += [on_source, on_target, late_pop_conn, late_ack_conn, late_release_conn,
                  late_extend_conn]
        late_pids = [c.get_server_pid() for c in conns[-4:]]
        # Before the move: the first partition delivered and acknowledged up to offset 1,
        # the second delivered up to offset 1 under lease b0, the third under lease c0,
        # expired since.
        assert await _claim(on_source, route, popped, "a0") == (0, 1)
        assert await _ack_through(on_source, route, popped, f"{p_name}-1", "a0") == "ok"
        assert await _claim(on_source, route, acked, "b0") == (0, 1)
        assert await _claim(on_source, route, released, "c0") == (0, 1)
        # A pop under lease e0 that claimed the fourth partition and one on another shard;
        # its link of the two (a write) waits for the move, and lands on the new copy below.
        assert await _claim(on_source, route, spanned, "e0") == (0, 1)
        assert await _claim(coordinator, route_elsewhere, elsewhere, "e0") == (0, 1)
        await coordinator.execute(
            "UPDATE queen.log_consumers SET lease_expires_at = now() - interval '1 second'"
            " WHERE partition_id = $1", released)

        # The move, done but not committed; its commit then held after every worker
        # prepared (the coordinator waits there for a synchronous standby that never comes).
        await mover.execute("BEGIN")
        await mover.execute(
            "SELECT citus_move_shard_placement($1, '127.0.0.1', $2, '127.0.0.1', $3,"
            " shard_transfer_mode => 'block_writes')", shard, source.port, target.port)
        gpid = await mover.fetchval("SELECT citus_backend_gpid()")
        await coordinator.execute("ALTER SYSTEM SET synchronous_standby_names = 'queen_nobody'")
        await coordinator.execute("SELECT pg_reload_conf()")
        await commits_wait_for_a_standby(cluster.coordinator.dsn(database), coordinator)
        commit = asyncio.ensure_future(mover.execute("COMMIT"))
        await wait_for(lambda: _prepared(on_source), timeout=30)
        # The source's sessions of the move (those COMMIT PREPARED would reach) stop.
        for row in await on_source.fetch(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
                f"citus_internal gpid={gpid}"):
            stopped.append(psutil.Process(row["pid"]))
            stopped[-1].send_signal(signal.SIGSTOP)
        assert stopped
        await coordinator.execute("ALTER SYSTEM RESET synchronous_standby_names")
        await coordinator.execute("SELECT pg_reload_conf()")

        async def committed_but_on_the_source() -> bool:
            placed = await coordinator.fetchval(
                "SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $1", shard)
            return placed == target.port and not await _prepared(on_target)
        await wait_for(committed_but_on_the_source, timeout=30)
        assert not commit.done() and await _prepared(on_source)

        # Through the target, applied on the new copy: the first partition delivered and
        # acknowledged up to offset 3; the second acknowledged up to 1 (lease b0 ends) and
        # delivered up to 3 under lease b1.
        assert await _claim(on_target, route, popped, "a1") == (2, 3)
        assert await _ack_through(on_target, route, popped, f"{p_name}-3", "a1") == "ok"
        assert await _ack_through(on_target, route, acked, f"{a_name}-1", "b0") == "ok"
        assert await _claim(on_target, route, acked, "b1") == (2, 3)
        assert await _claim(on_target, route, released, "c1") == (0, 1)
        assert _push_one(clients[target.port], queue, p_name, "via-target") == "queued"
        await on_target.execute("SELECT queen.link_lease($1, 'e0', $2::bigint[])",
                                route, [route_elsewhere])
        # Through the source, which cannot write before the move commits there: a pop of
        # the first partition, an ack of the second under lease b0, a push to the first,
        # the reaper's release of the third's expired lease (c0's, on the old copy), an
        # extension of lease e0.
        late_pop = asyncio.ensure_future(_claim(late_pop_conn, route, popped, "a2"))
        late_ack = asyncio.ensure_future(
            _ack_through(late_ack_conn, route, acked, f"{a_name}-0", "b0"))
        late_push = asyncio.ensure_future(asyncio.to_thread(
            _push_one, clients[source.port], queue, p_name, "via-source"))
        late_release = asyncio.ensure_future(late_release_conn.fetch(
            "SELECT * FROM queen.release_cursors($1, $2::bigint[], $3::text[], false)",
            route, [released], ["g1"]))
        late_extend = asyncio.ensure_future(late_extend_conn.fetch(
            "SELECT * FROM queen.extend_leases($1, ARRAY['e0'], ARRAY[60::float8],"
            " ARRAY[''])", route))

        async def all_wait() -> bool:
            return bool(await on_source.fetchval(
                "SELECT count(*) = 5 FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND (pid = ANY($1::integer[])"
                "       OR query LIKE '%queen.append_partitions(%')", late_pids))
        await wait_for(all_wait, timeout=30)
        for process in stopped:  # the move commits on the source
            process.send_signal(signal.SIGCONT)
        stopped.clear()
        await within(30, commit)
        answers = (await within(30, late_pop), await within(30, late_ack),
                   await within(30, late_push), len(await within(30, late_release)),
                   [r["routes"] for r in await within(30, late_extend) if r["routes"]])
        cursors = [await coordinator.fetchval(
            "SELECT committed FROM queen.log_consumers WHERE partition_id = $1", partition)
            for partition in (popped, acked)]
        head = await coordinator.fetchval(
            "SELECT last_offset FROM queen.log_partitions WHERE id = $1", popped)
        holder = await coordinator.fetchval(
            "SELECT worker_id FROM queen.log_consumers WHERE partition_id = $1", released)
    finally:
        for process in stopped:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGCONT)
        await coordinator.execute("ALTER SYSTEM RESET synchronous_standby_names")
        await coordinator.execute("SELECT pg_reload_conf()")
        if commit is not None:
            with contextlib.suppress(Exception):
                await within(30, commit)
        for conn in conns:
            conn.terminate()
        brokers.close()
    # The extension names the lease's other shard, where the broker extends it next.
    assert answers == ((4, 5), "refused", "queued", 0, [[route_elsewhere]])
    assert cursors == [3, 1]
    assert head == 7  # offsets 0-5, then the push through the target, then this one
    assert holder == "c1"  # the live lease is kept


async def test_two_replays_of_a_dead_letter_during_a_shard_move_replay_it_once(
        citus_cluster: TestCluster) -> None:
    """Two replays of one dead letter by its row id, and two of another by its message
    address, while a block_writes move of their shard has not committed (on any node: the
    replays run on the coordinator). Citus makes writes wait for a move,
    not reads: each replay locked the row on the old copy (the second waiting for the
    first's lock there), then appended and deleted on the new copy once the move committed;
    the old copy's row was never deleted, so the second found it unchanged and replayed the
    letter again (two messages from one dead letter). A replay now takes the shard's
    placement lock before it reads the row (queen.hold_placement): it reads the copy it
    deletes from, and the second finds the row gone."""
    url = await citus_cluster.database()
    cluster = citus_cluster.cluster
    database = _database(url)
    coordinator = await asyncpg.connect(cluster.coordinator.dsn(database))
    mover = await asyncpg.connect(cluster.coordinator.dsn(database))
    core = await Database.open(Settings(db_pool_size=6), url, migrate=False)
    dlq = DeadLetters(core, _no_wakes, Tenants(core, TenancySettings(), live_seconds=10),
                      list_max_bytes=64 << 20)
    commit: asyncio.Future[str] | None = None
    replays: asyncio.Future[list[ReplayedLetter | None]] | None = None
    try:
        [appended] = await append(coordinator, [(PartitionName("q-" + uuid.uuid4().hex[:10],
                                                               "p"), [
            NewMessage(uuid7(), f"m{i}", b"%d" % i) for i in range(2)])])
        pid = appended.partition_id
        route = (await ShardMap.read(coordinator)).route_of(pid)
        for i in range(2):  # both dead-lettered
            assert await _claim(coordinator, route, pid, f"l{i}", batch=1) == (i, i)
            assert await _ack_through(coordinator, route, pid, f"m{i}", f"l{i}",
                                      status="dlq") == "ok"
        by_id = await coordinator.fetchval(
            "SELECT id FROM queen.log_dlq WHERE transaction_id = 'm0'")
        shard, port = await coordinator.fetchrow(
            "SELECT shardid, nodeport FROM pg_dist_shard_placement WHERE shardid ="
            " get_shard_id_for_distribution_column('queen.log_partitions', $1::bigint)", pid)
        target = next(w for w in cluster.workers if w.port != port)

        await mover.execute("BEGIN")  # the move, done, its commit to come
        await mover.execute(
            "SELECT citus_move_shard_placement($1, '127.0.0.1', $2, '127.0.0.1', $3,"
            " shard_transfer_mode => 'block_writes')", shard, port, target.port)
        replays = asyncio.gather(*(
            [dlq.replay_id(by_id) for _ in range(2)]
            + [dlq.replay(PartitionId(pid), "m1") for _ in range(2)]))
        nodes = [await asyncpg.connect(n.dsn(database)) for n in cluster.nodes]

        # Every replay waits at a lock: the move's on the coordinator (a write, or the
        # hold), or, without the hold, the first replay's row lock on the old copy.
        async def all_wait() -> bool:
            return sum([await n.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                "   AND datname = current_database()") for n in nodes]) == 4
        try:
            await wait_for(all_wait, timeout=30)
        finally:
            for n in nodes:
                await n.close()
        commit = asyncio.ensure_future(mover.execute("COMMIT"))
        await within(30, commit)
        replayed = await within(30, replays)
        head = await coordinator.fetchval(
            "SELECT last_offset FROM queen.log_partitions WHERE id = $1", pid)
        left = await coordinator.fetchval("SELECT count(*) FROM queen.log_dlq")
    finally:
        for pending in (commit, replays):
            if pending is not None:
                with contextlib.suppress(Exception):
                    await within(30, pending)
        for conn in (coordinator, mover):
            conn.terminate()
        await core.close()
    assert [r is not None for r in replayed].count(True) == 2, replayed  # once each
    assert {r.original_transaction_id for r in replayed if r is not None} == {"m0", "m1"}
    assert (head, left) == (3, 0)  # offsets 0-1, then one replay of each


async def test_a_stream_cycle_during_a_shard_move_reads_the_cursor_it_writes(
        citus_cluster: TestCluster) -> None:
    """A stream cycle that acknowledges part of its leased batch (keeping the lease) while a
    block_writes move of the source partition's shard has not committed, on the coordinator
    where cycles run. Its commit waits (a sink push meets a locked sink head) while its lease
    runs out and the stream's next runner claims the partition and commits a cycle of its
    own. Citus makes writes wait for a move, not reads: the cycle read the cursor and locked
    it on the old copy, so the runner claimed on the new copy the messages the cycle was
    acknowledging, and both cycles applied them (the runner's ack counted from the cursor
    the first cycle wrote). A cycle now takes the shard's placement lock before it reads the
    cursor (queen.hold_placement): it waits for the move, then holds the row the runner's
    claim must wait for, which then starts after the acknowledged messages."""
    url = await citus_cluster.database()
    cluster = citus_cluster.cluster
    database = _database(url)
    coordinator = await asyncpg.connect(cluster.coordinator.dsn(database))
    mover = await asyncpg.connect(cluster.coordinator.dsn(database))
    sink_holder = await asyncpg.connect(cluster.coordinator.dsn(database))
    runner = await asyncpg.connect(cluster.coordinator.dsn(database))
    nodes: list[asyncpg.Connection] = []
    core = await Database.open(Settings(db_pool_size=6), url, migrate=False)
    streams = Streams(core, _no_wakes, lambda: None,
                      Tenants(core, TenancySettings(), live_seconds=10),
                      state_max_bytes=Settings().list_max_bytes)
    pending: list[asyncio.Future[Any]] = []
    try:
        source, sink_queue = "q-" + uuid.uuid4().hex[:10], "s-" + uuid.uuid4().hex[:10]
        [appended] = await append(coordinator, [(PartitionName(source, "p"), [
            NewMessage(uuid7(), f"m{i}", b"%d" % i) for i in range(6)])])
        pid = appended.partition_id
        heads = await append(coordinator, [(PartitionName(sink_queue, f"s{i}"), [
            NewMessage(uuid7(), "first", b"0")]) for i in range(3)])
        shard_of = "get_shard_id_for_distribution_column('queen.log_partitions', $1::bigint)"
        shard, port = await coordinator.fetchrow(
            f"SELECT shardid, nodeport FROM pg_dist_shard_placement WHERE shardid = {shard_of}",
            pid)
        # A sink partition on another shard: its head, locked, holds the cycle's commit back.
        sink_shards = [await coordinator.fetchval(f"SELECT {shard_of}", h.partition_id)
                       for h in heads]
        sink = next(i for i, s in enumerate(sink_shards) if s != shard)
        target = next(w for w in cluster.workers if w.port != port)
        registered = await streams.register(name="totals", source_queue=source,
                                            sink_queue=sink_queue, config_hash="h",
                                            reset=False)
        query = str(registered.query_id)
        route = (await ShardMap.read(coordinator)).route_of(pid)
        assert await _claim(coordinator, route, pid, "l1") == (0, 1)
        await sink_holder.execute("BEGIN")
        await sink_holder.execute(
            "SELECT 1 FROM queen.log_partitions WHERE id = $1 FOR UPDATE",
            heads[sink].partition_id)
        sink_port = await coordinator.fetchval(
            f"SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = {shard_of}",
            heads[sink].partition_id)
        on_sink_node = next(i for i, n in enumerate(cluster.nodes) if n.port == sink_port)
        nodes = [await asyncpg.connect(n.dsn(database)) for n in cluster.nodes]

        async def lock_waits() -> list[int]:  # per node
            return [await n.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                "   AND datname = current_database()") for n in nodes]

        await mover.execute("BEGIN")  # the move, done, its commit to come
        await mover.execute(
            "SELECT citus_move_shard_placement($1, '127.0.0.1', $2, '127.0.0.1', $3,"
            " shard_transfer_mode => 'block_writes')", shard, port, target.port)
        # Messages 0-1 acknowledged, the lease kept; one sink push, one state op.
        first = asyncio.ensure_future(streams.cycle(Cycle(
            query, str(pid), "g1", [StateOp(False, "total", "1")],
            [CyclePush(sink_queue, f"s{sink}", b"1")],
            CycleAck("l1", True, False, 2, "m1"))))
        pending.append(first)
        # It waits: for the move at the hold (without the hold: at the sink's head, the
        # cursor read on the old copy); once the move commits, at the sink's head.
        async def the_cycle_waits() -> bool:
            return sum(await lock_waits()) == 1
        await wait_for(the_cycle_waits, timeout=30)
        await within(30, mover.execute("COMMIT"))

        async def at_the_sink() -> bool:  # it has read the cursor
            waits = await lock_waits()
            return sum(waits) == waits[on_sink_node] == 1
        await wait_for(at_the_sink, timeout=30)

        async def next_runner() -> tuple[tuple[int, int] | None, CycleResult]:
            await runner.execute(  # the first cycle's lease runs out
                "UPDATE queen.log_consumers SET lease_expires_at = now() - interval '1 second'"
                " WHERE partition_id = $1", pid)
            span = await _claim(runner, route, pid, "l2", batch=4)
            done = await streams.cycle(Cycle(query, str(pid), "g1",
                                             [StateOp(False, "total", "2")], [],
                                             CycleAck("l2", True, True, 0, None)))
            return span, done

        second = asyncio.ensure_future(next_runner())
        pending.append(second)
        # The runner done, or waiting: for the cycle's row lock, or (its claim done) for
        # the cycle's turn on the partition.
        async def the_runner_waits() -> bool:
            return second.done() or sum(await lock_waits()) >= 2
        await wait_for(the_runner_waits, timeout=30)
        await sink_holder.execute("ROLLBACK")
        cycled = await within(30, first)
        claimed, cycled_next = await within(30, second)
        committed = await coordinator.fetchval(
            "SELECT committed FROM queen.log_consumers WHERE partition_id = $1", pid)
    finally:
        for future in pending:
            with contextlib.suppress(Exception):
                await within(30, future)
        for conn in (coordinator, mover, sink_holder, runner, *nodes):
            conn.terminate()
        await core.close()
    assert (cycled.success, cycled.ack_count) == (True, 2), cycled
    # The runner's claim starts after the acknowledged messages; its cycle acknowledges
    # the four it was given, up to offset 5.
    assert (claimed, cycled_next.success, cycled_next.ack_count, committed) == (
        (2, 5), True, 4, 5), cycled_next


async def _no_wakes(wakes: Iterable[Wake]) -> None:
    pass


def _push_one(client: httpx.Client, queue: str, partition: str, txid: str) -> str:
    """Push one message; answer its status, or the HTTP status and text of a failure."""
    r = client.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": partition, "payload": txid, "transactionId": txid}]})
    return str(r.json()[0]["status"]) if r.status_code == 201 else f"{r.status_code} {r.text}"


async def _claim(conn: asyncpg.Connection, route: int | None, pid: int,
                 lease: str, *, batch: int = 2) -> tuple[int, int] | None:
    """A pop of `batch` messages of the partition by group g1, sent to `conn`'s node as a
    broker sends it: the span delivered, if any."""
    rows = await reads.pop_ready(
        conn, route=route, tenant="", queue=None, namespace=None, task=None, partition=None,
        group="g1", named=True, seed_mode="all", seed_instant=None, store_seed=True,
        batch=batch, partitions=1, auto_ack=False, lease_seconds=60, lease_fallback=60,
        lease_id=lease, candidates=[pid], max_bytes=POP_MAX_BYTES)
    spans = {(r.span_start, r.span_end) for r in rows if r.verdict == "took"}
    assert len(spans) <= 1, spans
    for start, end in spans:
        assert start is not None and end is not None
        return start, end
    return None


async def _ack_through(conn: asyncpg.Connection, route: int | None, pid: int, txid: str,
                       lease: str, *, status: str = "completed") -> str:
    """An ack of one message by group g1 under `lease`, sent to `conn`'s node."""
    rows = await reads.ack(conn, route=route, items=reads.AckInputs(
        groups=["g1"], partition_ids=[pid], transaction_ids=[txid], statuses=[status],
        lease_ids=[lease], errors=None, tenants=[""]), scan_missing=False)
    return next(r.outcome for r in rows if r.idx == 1)


async def _prepared(conn: asyncpg.Connection) -> bool:
    """Whether the node holds a prepared transaction of this database."""
    return bool(await conn.fetchval(
        "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()"))
