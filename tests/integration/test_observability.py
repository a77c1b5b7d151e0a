"""Observability (docs/operating/metrics.md): `/metrics/prometheus` and `/metrics` aggregated over the
web workers, the analytics series sampled into `queen.stats_samples`, and the filters of the
status and resource routes.

The module runs its own 2-worker broker on a database of its own, so the cluster counters it
checks move only with the traffic it sends (the session broker's and other modules' counts
go to another database). Workers flush every 200 ms here.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from queen import Queen

from core.reaper import Reaper
from core.settings import Settings
from core.storage.database import Database
from core.upkeep import stats
from tests.support import BrokerProcess, create_database, pop_json, push_items

FLUSH_MS = 200
Sample = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
async def observed_url(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def observed(observed_url: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(observed_url, workers=2,
                       env={"METRICS_FLUSH_MS": str(FLUSH_MS)}) as proc:
        yield proc


@pytest.fixture
async def ohttp(observed: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    # A connection per request, so requests spread over both workers.
    async with httpx.AsyncClient(base_url=observed.url, timeout=30,
                                 limits=httpx.Limits(max_keepalive_connections=0)) as client:
        yield client


@pytest.fixture
async def odb(observed_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(observed_url)
    try:
        yield conn
    finally:
        await conn.close()


async def scrape(client: httpx.AsyncClient) -> Sample:
    r = await client.get("/metrics/prometheus")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: Sample = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(sample: Sample, name: str, **labels: str) -> float:
    return sample[(name, tuple(sorted(labels.items())))]


_COUNTED = ("queen_cluster_push_requests_total", "queen_cluster_push_messages_total",
            "queen_cluster_pop_requests_total", "queen_cluster_pop_messages_total",
            "queen_cluster_ack_requests_total", "queen_cluster_ack_messages_total",
            "queen_cluster_transactions_total", "queen_cluster_dlq_total")


def counted(sample: Sample) -> dict[str, float]:
    figures = {name: value(sample, name) for name in _COUNTED}
    for kind in ("push", "pop", "ack"):
        figures[f"{kind}_histogram_count"] = value(sample, f"queen_{kind}_duration_seconds_count")
    return figures


async def settled(client: httpx.AsyncClient) -> dict[str, float]:
    """The counters once two scrapes a few flushes apart agree (every worker has flushed)."""
    last = counted(await scrape(client))
    for _ in range(50):
        await asyncio.sleep(3 * FLUSH_MS / 1000)
        now = counted(await scrape(client))
        if now == last:
            return now
        last = now
    raise AssertionError("the counters never settled")


async def one_client_per_worker(url: str) -> list[httpx.AsyncClient]:
    """Two clients with one kept-alive connection each, served by different workers."""
    by_pid: dict[int, httpx.AsyncClient] = {}
    spare: list[httpx.AsyncClient] = []
    for _ in range(200):
        client = httpx.AsyncClient(base_url=url, timeout=30, limits=httpx.Limits(
            max_connections=1, max_keepalive_connections=1))
        pid = int((await client.get("/metrics")).json()["pid"])
        if pid in by_pid:
            spare.append(client)
        else:
            by_pid[pid] = client
        if len(by_pid) == 2:
            break
    for client in spare:
        await client.aclose()
    assert len(by_pid) == 2, "the broker did not serve from two workers"
    return list(by_pid.values())


async def test_prometheus_counters_add_up_the_traffic_of_both_workers(
        observed: BrokerProcess, ohttp: httpx.AsyncClient) -> None:
    queue = "m-" + uuid.uuid4().hex[:10]
    clients = await one_client_per_worker(observed.url)
    try:
        before = await settled(ohttp)
        for n, client in enumerate(clients):
            for k in range(3):  # 3 pushes of 2 messages per worker
                await push_items(client, queue, ["a", "b"], partition=f"p{n}",
                                 prefix=f"w{n}-{k}-")
            popped = await pop_json(client, f"{queue}/partition/p{n}", batch=2)
            assert popped is not None and len(popped["messages"]) == 2
            r = await client.post("/api/v1/ack/batch", json={"acknowledgments": [
                {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                 "leaseId": m["leaseId"], "status": "completed"}
                for m in popped["messages"]]})
            assert r.status_code == 200 and all(a["success"] for a in r.json()), r.text
            r = await client.post("/api/v1/transaction", json={"operations": [
                {"type": "push", "items": [{"queue": queue, "partition": f"p{n}",
                                            "payload": 1, "transactionId": f"tx-{n}"}]}]})
            assert r.status_code == 200 and r.json()["success"], r.text
        expected = {"queen_cluster_push_requests_total": 6,
                    "queen_cluster_push_messages_total": 12 + 2,
                    "queen_cluster_pop_requests_total": 2,
                    "queen_cluster_pop_messages_total": 4,
                    "queen_cluster_ack_requests_total": 2,
                    "queen_cluster_ack_messages_total": 4,
                    "queen_cluster_transactions_total": 2, "queen_cluster_dlq_total": 0,
                    "push_histogram_count": 6, "pop_histogram_count": 2,
                    "ack_histogram_count": 2}
        after = await settled(ohttp)
        assert {k: after[k] - before[k] for k in after} == expected
        sample = await scrape(clients[0])  # any worker answers the same totals
        assert counted(sample) == after
    finally:
        for client in clients:
            await client.aclose()
    processes = [dict(labels)["process"] for (name, labels) in sample
                 if name == "queen_process_resident_memory_bytes"]
    assert len(processes) == 2
    assert all(value(sample, "queen_process_resident_memory_bytes", process=p) > 1e6
               for p in processes)
    # Each worker holds a listening socket, connections and its pool's: some files, and
    # fewer than it may open.
    assert all(10 < value(sample, "queen_process_open_fds", process=p)
               < value(sample, "queen_process_max_fds", process=p) for p in processes)
    assert value(sample, "queen_db_pool_size") >= 2
    assert value(sample, "queen_db_pool_active") + value(sample, "queen_db_pool_idle") >= 2
    assert value(sample, "queen_uptime_seconds") > 0
    # The spool provider's defaults until maintenance mode is wired in.
    assert value(sample, "queen_maintenance_mode_enabled") == 0
    assert value(sample, "queen_file_buffer_pending") == 0
    assert value(sample, "queen_file_buffer_failed") == 0
    assert value(sample, "queen_file_buffer_db_healthy") == 1
    # The histogram is cumulative and its +Inf bucket is its count.
    assert value(sample, "queen_push_duration_seconds_bucket", le="+Inf") == value(
        sample, "queen_push_duration_seconds_count")
    assert value(sample, "queen_push_duration_seconds_sum") > 0


async def test_queue_gauges_show_dead_letters_lag_and_parked_pops(
        observed: BrokerProcess, ohttp: httpx.AsyncClient) -> None:
    queue = "g-" + uuid.uuid4().hex[:10]
    idle = "i-" + uuid.uuid4().hex[:10]
    await push_items(ohttp, queue, [1, 2])
    await push_items(ohttp, idle, [1], prefix="i")
    popped = await pop_json(ohttp, queue, batch=1)
    assert popped is not None
    [m] = popped["messages"]
    r = await ohttp.post("/api/v1/ack", json={
        "transactionId": m["transactionId"], "partitionId": m["partitionId"],
        "leaseId": m["leaseId"], "status": "dlq", "error": "poison"})
    assert r.status_code == 200 and r.json()[0]["success"], r.text
    await pop_json(ohttp, idle, batch=1)  # consume the idle queue's only message
    popped = await pop_json(ohttp, idle, batch=1)
    assert popped is None
    # A long poll parked on the now empty idle queue.
    parked = asyncio.create_task(ohttp.get(f"/api/v1/pop/queue/{idle}",
                                           params={"wait": "true", "timeout": "8000"}))
    try:
        deadline = time.monotonic() + 6
        while True:
            sample = await scrape(ohttp)
            # The cluster counters reach the database at a worker's next flush (FLUSH_MS),
            # which the parked pop can beat (CI saw it): wait for both.
            if (value(sample, "queen_queue_parked_consumers", queue=idle) == 1
                    and value(sample, "queen_cluster_dlq_total") >= 1):
                break
            assert time.monotonic() < deadline, "the parked pop or the dead letter never showed"
            await asyncio.sleep(0.1)
    finally:
        parked.cancel()
    assert value(sample, "queen_dlq_depth_by_queue", queue=queue) == 1
    assert value(sample, "queen_dlq_depth_by_queue", queue=idle) == 0
    assert value(sample, "queen_dlq_depth") >= 1
    assert value(sample, "queen_cluster_dlq_total") >= 1
    # The dead-lettered message committed the cursor past it; the second waits unconsumed.
    assert value(sample, "queen_queue_pop_lag_milliseconds", queue=queue) > 0
    assert value(sample, "queen_queue_pop_lag_milliseconds", queue=idle) == 0
    assert value(sample, "queen_queue_parked_consumers", queue=queue) == 0


async def test_json_metrics_report_real_request_counts_and_rates(
        observed: BrokerProcess, ohttp: httpx.AsyncClient) -> None:
    first = (await ohttp.get("/metrics")).json()
    for _ in range(5):
        assert (await ohttp.get("/health")).status_code == 200
    await asyncio.sleep(3 * FLUSH_MS / 1000)
    second = (await ohttp.get("/metrics")).json()
    assert isinstance(first["requests"]["total"], int)
    # our five /health calls and the second /metrics call, at least (all flushed by now)
    assert second["requests"]["total"] >= first["requests"]["total"] + 6
    assert second["requests"]["rate"] is not None and second["requests"]["rate"] > 0
    assert second["workers"] == 2 and second["database"]["healthy"] is True


# --- analytics -----------------------------------------------------------------------------

async def refresh(client: httpx.AsyncClient) -> None:
    r = await client.post("/api/v1/stats/refresh")  # no body, as the official client
    assert r.status_code == 200 and r.json()["success"] is True, r.text


def totals(series: dict[str, Any]) -> dict[str, int]:
    keys = ("pushed", "delivered", "acked", "failed", "deadLettered")
    return {k: sum(b[k] for b in series["buckets"]) for k in keys}


async def analytics(client: httpx.AsyncClient, **params: str) -> dict[str, Any]:
    r = await client.get("/api/v1/status/analytics", params={"interval": "minute", **params})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_analytics_series_count_the_traffic_between_samples(
        observed: BrokerProcess, ohttp: httpx.AsyncClient) -> None:
    ns = "an" + uuid.uuid4().hex[:8]
    queue, other = f"{ns}.load.q", f"{ns}.idle.q"
    await push_items(ohttp, other, [0], prefix="o")  # created before the baseline sample
    await refresh(ohttp)
    await push_items(ohttp, queue, list(range(5)))
    popped = await pop_json(ohttp, queue, batch=4)
    assert popped is not None
    msgs = popped["messages"]
    acks = ([{"status": "completed"}] * 2) + [{"status": "dlq", "error": "bad"},
                                              {"status": "failed", "error": "later"}]
    r = await ohttp.post("/api/v1/ack/batch", json={"acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "leaseId": m["leaseId"], **a} for m, a in zip(msgs, acks)]})
    assert r.status_code == 200 and all(a["success"] for a in r.json()), r.text
    want = {"pushed": 5, "delivered": 4, "acked": 3, "failed": 2, "deadLettered": 1}
    deadline = time.monotonic() + 10
    while True:  # a worker's counts reach the database within a flush interval
        await refresh(ohttp)
        series = await analytics(ohttp, queue=queue)
        if totals(series) == want or time.monotonic() > deadline:
            break
        await asyncio.sleep(FLUSH_MS / 1000)
    # acked counts messages the cursor moved past: 2 completed and the dead-lettered one
    assert totals(series) == want
    last = series["buckets"][-1]
    assert last["depth"] == 2  # offsets 3 (failed, to be retried) and 4
    assert last["lagSeconds"] > 0
    assert series["interval"] == "minute" and series["queue"] == queue
    assert series["sampleIntervalMs"] == 300000
    assert set(last) == {"at", "pushed", "delivered", "acked", "failed", "deadLettered",
                         "depth", "lagSeconds"}
    # Filters: the namespace holds both queues, the task only one, the other queue had none.
    assert totals(await analytics(ohttp, namespace=ns)) == want
    assert totals(await analytics(ohttp, task="load")) == want
    assert totals(await analytics(ohttp, queue=other))["pushed"] == 0
    # A window before any sample has no buckets; from after to is refused.
    past = await analytics(ohttp, queue=queue, **{"from": "2001-01-01T00:00:00Z",
                                                  "to": "2001-01-02T00:00:00Z"})
    assert past["buckets"] == []
    r = await ohttp.get("/api/v1/status/analytics", params={
        "from": "2030-01-02T00:00:00Z", "to": "2030-01-01T00:00:00Z"})
    assert r.status_code == 400 and "from" in r.json()["error"]
    r = await ohttp.get("/api/v1/status/analytics", params={"interval": "fortnight"})
    assert r.status_code == 400 and "interval" in r.json()["error"]
    # Hour buckets hold the same traffic (the official client's call).
    client = Queen(observed.url)
    try:
        hourly = await client.admin.get_analytics(interval="hour", queue=queue)
    finally:
        await client.close()
    assert totals(hourly) == want


async def test_reaper_samples_on_its_interval_and_trims_old_samples(
        observed: BrokerProcess, observed_url: str, odb: asyncpg.Connection) -> None:
    settings = Settings(stats_sample_interval_ms=60_000, metrics_retention_days=2)
    db = await Database.open(settings, observed_url, migrate=False)
    try:
        passes = await odb.fetchval("SELECT count(*) FROM queen.stats_samples WHERE queue_id = 0")
        await odb.execute(
            "INSERT INTO queen.stats_samples VALUES"
            " (now() - interval '3 days', 0, '', '', '', 0, 0, 0, 0, 0, 0, 0),"
            " (now() - interval '1 day', 0, '', '', '', 0, 0, 0, 0, 0, 0, 0)")
        await odb.execute(
            "INSERT INTO queen.stats_processes VALUES ('gone:1', now() - interval '2 hours',"
            " now() - interval '1 hour', '{}')")
        reaper = Reaper(db, settings)
        await reaper.run_pass()  # due at once: samples, trims
        await reaper.run_pass()  # not due again for a minute
        after = await odb.fetchval("SELECT count(*) FROM queen.stats_samples WHERE queue_id = 0")
        assert after == passes + 1 + 1  # one new pass; the 1-day-old row stays, the 3-day one went
        oldest = await odb.fetchval("SELECT min(sampled_at) FROM queen.stats_samples")
        assert oldest > datetime.now(UTC) - timedelta(days=2)
        assert await odb.fetchval(
            "SELECT count(*) FROM queen.stats_processes WHERE process = 'gone:1'") == 0
    finally:
        await db.close()


# --- status and resource filters ----------------------------------------------------------

async def test_status_and_queue_lists_apply_their_filters(
        observed: BrokerProcess, ohttp: httpx.AsyncClient) -> None:
    a, b = "fa" + uuid.uuid4().hex[:8], "fb" + uuid.uuid4().hex[:8]
    names = [f"{a}.t1.x", f"{a}.t2.y", f"{b}.t1.z"]
    await refresh(ohttp)  # a pass before the queues exist: they count from zero after it
    for n, name in enumerate(names):
        await push_items(ohttp, name, list(range(n + 1)))

    async def get(path: str, **params: str) -> dict[str, Any]:
        r = await ohttp.get(path, params=params)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    s = await get("/api/v1/status", namespace=a)
    assert (s["queues"], s["partitions"], s["messages"]["total"]) == (2, 2, 1 + 2)
    s = await get("/api/v1/status", namespace=a, task="t2")
    assert (s["queues"], s["messages"]["total"], s["messages"]["pending"]) == (1, 2, 2)
    s = await get("/api/v1/status", queue=names[2])
    assert (s["queues"], s["messages"]["total"]) == (1, 3)
    assert s["filters"] == {"queue": names[2], "namespace": None, "task": None}
    s = await get("/api/v1/status", namespace="no-such-" + a)
    assert (s["queues"], s["messages"]["total"]) == (0, 0)
    # Throughput in the window: sampled traffic of the filtered queues.
    await refresh(ohttp)
    await push_items(ohttp, names[0], [9, 9], prefix="later")
    await refresh(ohttp)
    s = await get("/api/v1/status", queue=names[0])
    # its first message too: the queue was created after the pass before (earlier tests')
    assert s["throughput"]["pushed"] == 1 + 2
    s = await get("/api/v1/status", queue=names[0], **{"from": "2001-01-01T00:00:00Z",
                                                      "to": "2001-01-01T01:00:00Z"})
    assert s["throughput"]["pushed"] == 0

    page = await get("/api/v1/status/queues", namespace=a, limit="1")
    assert page["total"] == 2 and [q["name"] for q in page["queues"]] == [names[0]]
    page = await get("/api/v1/status/queues", namespace=a, limit="1", offset="1")
    assert [q["name"] for q in page["queues"]] == [names[1]]
    page = await get("/api/v1/status/queues", task="t1", queue=names[2])
    assert [q["name"] for q in page["queues"]] == [names[2]]
    assert page["queues"][0]["messages"]["total"] == 3

    client = Queen(observed.url)
    try:
        listed = await client.admin.list_queues(task="t1", search=a)
        stats_page = await client.admin.get_queue_stats(namespace=b)
        overall = await client.admin.get_status(namespace=b)
    finally:
        await client.close()
    assert [q["name"] for q in listed["queues"]] == [names[0]]
    assert [q["name"] for q in stats_page["queues"]] == [names[2]]
    assert overall["queues"] == 1
    # from/to bound the queues' creation time on the lists.
    now = datetime.now(UTC)
    later = (now + timedelta(hours=1)).isoformat()
    earlier = (now - timedelta(hours=1)).isoformat()
    listed_now = await get("/api/v1/resources/queues", namespace=a, **{"from": earlier})
    assert listed_now["total"] == 2
    assert (await get("/api/v1/resources/queues", namespace=a, **{"from": later}))["total"] == 0
    assert (await get("/api/v1/resources/queues", namespace=a, to=earlier))["total"] == 0
    assert (await get("/api/v1/resources/queues", queue=names[1]))["total"] == 1
    r = await ohttp.get("/api/v1/resources/queues", params={"from": "yesterday"})
    assert r.status_code == 400 and "from" in r.json()["error"]
    r = await ohttp.get("/api/v1/status", params={"from": "2030-01-02T00:00:00Z",
                                                  "to": "2030-01-01T00:00:00Z"})
    assert r.status_code == 400


async def test_sampling_counts_nothing_twice_when_passes_race(
        observed: BrokerProcess, observed_url: str, ohttp: httpx.AsyncClient) -> None:
    """Concurrent passes (two reapers, a refresh) are serialised: each reads the baseline
    the previous one wrote, so traffic is counted once."""
    queue = "race-" + uuid.uuid4().hex[:8]
    await refresh(ohttp)
    await push_items(ohttp, queue, list(range(7)))
    settings = Settings(db_pool_size=4)
    db = await Database.open(settings, observed_url, migrate=False)
    try:
        await asyncio.gather(*(stats.sample(db, settings) for _ in range(4)))
    finally:
        await db.close()
    assert totals(await analytics(ohttp, queue=queue))["pushed"] == 7
