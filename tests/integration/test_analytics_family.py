"""The analytics family (`/api/v1/analytics/*`, docs/operating/metrics.md) against real broker
processes: the official client's admin calls answer the kept history, a killed worker shows
as a process that ended beside the one that replaced it, the per-queue series follow the
samples (throughput, acks, dead letters, lag, retention by rule, evictions), bad windows are
refused, and the reaper keeps the minute rows PROCESS_METRICS_RETENTION_DAYS.

Each test runs its own broker on a database of its own, so every figure it checks moves only
with the traffic it sends. Processes flush every 200 ms; the reaper samples every second.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families
from queen import Queen

from core.reaper import Reaper
from core.settings import Settings
from core.storage.database import Database
from tests.support import BrokerProcess, configure, pop_json, push_items, wait_for

ENV = {"METRICS_FLUSH_MS": "200", "STATS_SAMPLE_INTERVAL_MS": "1000",
       "REAPER_INTERVAL_MS": "100", "RETENTION_INTERVAL": "300"}


@pytest.fixture
def running(own_database: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(own_database, workers=2, reaper=True, env=ENV) as proc:
        yield proc


@pytest.fixture
async def http(running: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    # A connection per request, so requests spread over both workers.
    async with httpx.AsyncClient(base_url=running.url, timeout=30,
                                 limits=httpx.Limits(max_keepalive_connections=0)) as client:
        yield client


async def get(http: httpx.AsyncClient, route: str, **params: Any) -> Any:
    r = await http.get(f"/api/v1/analytics/{route}", params=params)
    assert r.status_code == 200, r.text
    return r.json()


async def ack(http: httpx.AsyncClient, messages: list[dict[str, Any]],
              statuses: list[str]) -> None:
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "leaseId": m["leaseId"], "status": s, **({"error": "no"} if s != "completed" else {})}
        for m, s in zip(messages, statuses)]})
    assert r.status_code == 200 and all(a["success"] for a in r.json()), r.text


async def test_official_client_admin_calls_answer_the_kept_history(
        running: BrokerProcess, http: httpx.AsyncClient) -> None:
    queue = "wm-" + uuid.uuid4().hex[:8]
    await configure(http, queue, retryLimit=0)
    await push_items(http, queue, list(range(12)))
    popped = await pop_json(http, queue, batch=5)
    assert popped is not None and len(popped["messages"]) == 5
    await ack(http, popped["messages"], ["completed"] * 3 + ["dlq", "failed"])

    client = Queen(running.url)
    try:
        async def settled() -> dict[str, Any] | None:
            answer: dict[str, Any] = await client.admin.get_worker_metrics()
            summary = answer["summary"]
            # (a request is counted once answered: after its messages, maybe a flush later)
            done = (summary["totalPushMessages"], summary["totalPopMessages"],
                    summary["totalAckMessages"], summary["totalPushRequests"],
                    summary["totalPopRequests"], summary["totalAckRequests"]) == (
                        12, 5, 5, 1, 1, 1)
            # every process has flushed (the second web worker may start after /health)
            return answer if done and len(answer["workers"]) == 3 else None

        worker = await wait_for(settled, timeout=15, interval=0.2)
        system = await client.admin.get_system_metrics()
    finally:
        await client.close()

    summary = worker["summary"]
    assert (summary["totalAckFailed"], summary["totalDlq"]) == (2, 1)
    # Two web workers and the reaper, all alive, each started once in this window.
    roles = sorted(w["role"] for w in worker["workers"])
    assert roles == ["reaper", "web", "web"], worker["workers"]
    assert all(w["alive"] for w in worker["workers"])
    assert summary["processes"] == 3 and summary["processStarts"] == 3
    # The points add up to the totals, newest first, one-minute buckets over the hour.
    points = worker["timeSeries"]
    assert worker["bucketMinutes"] == 1 and worker["pointCount"] == len(points) >= 1
    assert [p["timestamp"] for p in points] == sorted((p["timestamp"] for p in points),
                                                      reverse=True)
    for key, total in (("pushMessages", 12), ("popMessages", 5), ("ackMessages", 5),
                       ("ackFailed", 2), ("dlqCount", 1), ("ackSuccess", 3)):
        assert sum(p[key] for p in points) == total, key
    # Latency from the histograms: one push request timed, an estimate per quantile.
    push = [p["latency"]["push"] for p in points if p["latency"]["push"]["count"]]
    assert sum(p["count"] for p in push) == 1
    assert push[0]["avgMs"] > 0 and 0 < push[0]["p50Ms"] <= push[0]["p99Ms"]
    # What the broker does not measure is null, not 0.
    assert points[0]["avgEventLoopLagMs"] is None and points[0]["lagCount"] is None
    # System metrics: one replica per process, gauges per bucket.
    assert system["replicaCount"] == 3
    assert {(r["hostname"], r["pid"]) for r in system["replicas"]} == {
        (w["hostname"], w["pid"]) for w in worker["workers"]}
    web = next(r for r in system["replicas"] if r["role"] == "web")
    point = web["timeSeries"][-1]
    assert point["sampleCount"] >= 1
    metrics = point["metrics"]
    assert metrics["memory"]["rss_bytes"]["last"] > 10_000_000
    assert metrics["database"]["pool_size"]["last"] >= 1
    assert set(metrics["cpu"]["user_us"]) == {"avg", "min", "max", "last"}
    # The filters: one process; a window before anything was kept.
    only = await get(http, "system-metrics", hostname=web["hostname"], workerId=web["pid"])
    assert [r["pid"] for r in only["replicas"]] == [web["pid"]]
    past = await get(http, "worker-metrics", **{"from": "2001-01-01T00:00:00Z",
                                               "to": "2001-01-01T01:00:00Z"})
    assert past["timeSeries"] == [] and past["workers"] == []
    assert past["timeRange"] == {"from": "2001-01-01T00:00:00.000000Z",
                                 "to": "2001-01-01T01:00:00.000000Z"}


def _web_workers(running: BrokerProcess) -> list[int]:
    """The live web workers' pids (a killed one is a zombie until the supervisor reaps it)."""
    assert running.web is not None
    pids = []
    for child in psutil.Process(running.web.pid).children():
        try:
            if "broker.worker" in " ".join(child.cmdline()):
                pids.append(child.pid)
        except psutil.Error:  # gone, or a zombie
            continue
    return pids


async def _prometheus(http: httpx.AsyncClient, name: str) -> float:
    r = await http.get("/metrics/prometheus")
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"{name} is not exported")


async def test_a_killed_worker_shows_as_a_process_that_ended_beside_its_replacement(
        running: BrokerProcess, http: httpx.AsyncClient) -> None:
    first = set(_web_workers(running))
    assert len(first) == 2
    await wait_for(lambda: _prometheus_equals(http, "queen_process_starts_total", 3),
                   timeout=15, interval=0.2)
    victim = min(first)
    psutil.Process(victim).kill()

    async def replaced() -> set[int] | None:
        now = set(_web_workers(running))
        return now if len(now) == 2 and victim not in now else None

    now = await wait_for(replaced, timeout=30, interval=0.2)
    (newcomer,) = now - first
    await wait_for(lambda: _prometheus_equals(http, "queen_process_starts_total", 4),
                   timeout=15, interval=0.2)

    async def listed() -> dict[int, dict[str, Any]] | None:
        workers = {w["pid"]: w for w in (await get(http, "worker-metrics"))["workers"]}
        gone = workers.get(victim)
        # the heartbeat of the killed one goes stale after five flush intervals
        return workers if newcomer in workers and gone and not gone["alive"] else None

    workers = await wait_for(listed, timeout=15, interval=0.2)
    assert workers[newcomer]["alive"] and workers[newcomer]["role"] == "web"
    assert workers[newcomer]["startedAt"] > workers[victim]["startedAt"]
    assert workers[victim]["lastSeen"] <= workers[newcomer]["lastSeen"]
    summary = (await get(http, "worker-metrics"))["summary"]
    assert summary["processStarts"] == 4 and summary["processes"] == 4


async def _prometheus_equals(http: httpx.AsyncClient, name: str, want: float) -> bool:
    return await _prometheus(http, name) == want


async def test_queue_series_follow_the_samples(
        running: BrokerProcess, http: httpx.AsyncClient) -> None:
    ns = "qs" + uuid.uuid4().hex[:8]
    busy, kept, stale = f"{ns}.busy", f"{ns}.kept", f"{ns}.stale"
    start = datetime.now(UTC) - timedelta(seconds=1)
    await configure(http, busy, retryLimit=0)
    await configure(http, kept, retentionEnabled=True, retentionSeconds=1)
    await configure(http, stale, maxWaitTimeSeconds=1)
    await push_items(http, busy, list(range(10)))
    await push_items(http, kept, list(range(5)))
    await push_items(http, stale, list(range(3)))
    popped = await pop_json(http, busy, batch=4)
    assert popped is not None
    await ack(http, popped["messages"], ["completed"] * 3 + ["dlq"])
    await asyncio.sleep(1.2)  # `stale`'s messages waited too long; `kept`'s are past retention
    assert await pop_json(http, stale) is None  # its three are evicted, not delivered

    window = {"from": start.isoformat(), "namespace": ns}

    seen: list[Any] = []

    async def sampled() -> dict[str, Any] | None:
        ops = await get(http, "queue-ops", **window)
        retention = await get(http, "retention", **window)
        sums = {q: {k: sum(p[k] for p in ops["series"] if p["queueName"] == q)
                    for k in ("pushMessages", "popMessages", "ackSuccess", "ackFailed",
                              "deadLettered", "evicted")}
                for q in (busy, kept, stale)}
        seen[:] = [sums, retention["totals"]]
        done = (sums[busy] == {"pushMessages": 10, "popMessages": 4, "ackSuccess": 3,
                               "ackFailed": 1, "deadLettered": 1, "evicted": 0}
                and sums[stale]["evicted"] == 3 and retention["totals"]["retentionMsgs"] == 5)
        return {"ops": ops, "retention": retention, "sums": sums} if done else None

    try:
        got = await wait_for(sampled, timeout=20, interval=0.3)
    except AssertionError:
        raise AssertionError(f"the series did not follow the samples; last seen: {seen}"
                             ) from None
    ops, retention = got["ops"], got["retention"]
    assert ops["queues"] == sorted([busy, kept, stale])
    assert got["sums"][kept]["pushMessages"] == 5
    assert retention["totals"] == {"retentionMsgs": 5, "completedRetentionMsgs": 0,
                                   "evictionMsgs": 3, "totalMsgs": 8,
                                   "eventCount": retention["totals"]["eventCount"]}
    assert retention["totals"]["eventCount"] >= 1  # segments deleted
    busy_points = [p for p in ops["series"] if p["queueName"] == busy]
    assert busy_points[-1]["depth"] == 6 and busy_points[-1]["partitionCount"] == 1
    assert max(p["maxLagMs"] for p in busy_points) > 0
    assert ops["bucketMinutes"] == 1 and busy_points[0]["pushRequests"] is None
    # queue-lag: a bare array, newest first, the queue filter applied.
    lag = await get(http, "queue-lag", queue=busy, **{"from": start.isoformat()})
    assert isinstance(lag, list) and lag and {p["queueName"] for p in lag} == {busy}
    assert sum(p["popCount"] for p in lag) == 4
    assert [p["bucketTime"] for p in lag] == sorted((p["bucketTime"] for p in lag),
                                                    reverse=True)


async def test_bad_windows_are_refused_with_the_parameter_named(
        running: BrokerProcess, http: httpx.AsyncClient) -> None:
    for route in ("system-metrics", "worker-metrics", "queue-lag", "queue-ops", "retention"):
        r = await http.get(f"/api/v1/analytics/{route}", params={
            "from": "2030-01-02T00:00:00Z", "to": "2030-01-01T00:00:00Z"})
        assert r.status_code == 400 and "from" in r.json()["error"], (route, r.text)
        r = await http.get(f"/api/v1/analytics/{route}", params={"from": "yesterday"})
        assert r.status_code == 400 and "from" in r.json()["error"], (route, r.text)
    r = await http.get("/api/v1/analytics/worker-metrics", params={"workerId": "-3"})
    assert r.status_code == 400 and "workerId" in r.json()["error"], r.text
    r = await http.get("/api/v1/analytics/queue-ops", params={"queue": "no such\nqueue"})
    assert r.status_code == 400 and "queue" in r.json()["error"], r.text


async def test_the_reaper_trims_minute_rows_past_their_retention(own_database: str) -> None:
    settings = Settings(process_metrics_retention_days=2, metrics_retention_days=30)
    db = await Database.open(settings, own_database, migrate=False)
    conn = await asyncpg.connect(own_database)
    try:
        for process, age in (("old:1", "3 days"), ("kept:2", "1 day")):
            await conn.execute(
                "INSERT INTO queen.stats_minutes VALUES ($1, date_trunc('minute', now()"
                f" - interval '{age}'), 'web', now() - interval '4 days', 1, '{{}}',"
                " 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0)", process)
        await Reaper(db, settings).run_pass()  # a sample is due at once, trims with it
        kept = await conn.fetch("SELECT process FROM queen.stats_minutes")
        assert [r["process"] for r in kept] == ["kept:2"]
    finally:
        await conn.close()
        await db.close()
