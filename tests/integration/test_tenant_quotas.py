"""Quotas and rate limits per tenant (docs/security/tenants.md), on a broker of two web
workers (each enforcing its share of a tenant's rates) and a reaper (retention).

Each test gives a tenant of its own a quota through the operator's API and checks Queen's
answers: 429 rate_limited with Retry-After over a rate, 413 payload_too_large over a size,
403 quota_exceeded over a cap, 403 storage_quota_exceeded while the stored bytes are at the
quota, lifted once space is freed; and that a tenant without a quota never notices.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.support import PYTHON, ROOT, BrokerProcess, create_database
from tests.tokens import AUTH_ENV, AUTH_SECRET, Signer, bearer

SIGNER = Signer(AUTH_SECRET, "HS256")
REFRESH_S = 0.2  # QUEEN_TENANT_REFRESH_MS below
ENV = {**AUTH_ENV, "QUEEN_TENANT_REFRESH_MS": "200", "QUEEN_TENANT_USAGE_INTERVAL_MS": "300",
       "METRICS_FLUSH_MS": "200", "RETENTION_INTERVAL": "300"}


@pytest.fixture(scope="module")
async def quotas_database(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def quotas_broker(quotas_database: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(quotas_database, workers=2, reaper=True, env=ENV) as proc:
        yield proc


def operator_token() -> str:
    return SIGNER.token("op", role="admin")


def tenant_token(tenant: str) -> str:
    return SIGNER.token(f"u-{tenant}", role="admin", tenant=tenant)


@pytest.fixture
async def operator(quotas_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=quotas_broker.url, timeout=30,
                                 headers=bearer(operator_token())) as client:
        yield client


def clients(broker: BrokerProcess, tenant: str, n: int) -> list[httpx.AsyncClient]:
    """`n` clients of one tenant, each with a connection of its own: requests spread over
    the web workers as a pool of connections spreads them."""
    return [httpx.AsyncClient(base_url=broker.url, timeout=30, headers=bearer(
        tenant_token(tenant)), limits=httpx.Limits(max_connections=1)) for _ in range(n)]


async def set_quota(operator: httpx.AsyncClient, tenant: str, **limits: Any) -> None:
    r = await operator.put(f"/api/v1/tenants/{tenant}/quota", json=limits)
    assert r.status_code == 200, r.text
    await both_workers_know(operator)


async def both_workers_know(operator: httpx.AsyncClient) -> None:
    """Wait until every worker counts both workers (their shares are then halves) and has
    refreshed since the quota was stored."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        seen = []
        for _ in range(6):  # new connections land on either worker
            async with httpx.AsyncClient(base_url=str(operator.base_url),
                                         headers=dict(operator.headers)) as fresh:
                seen.append((await fresh.get("/api/v1/tenants")).json()["processes"])
        if all(n == 2 for n in seen):
            await asyncio.sleep(3 * REFRESH_S)
            return
        await asyncio.sleep(REFRESH_S)
    raise AssertionError(f"the workers count {seen} processes, not 2")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def push_body(queue: str, *payloads: Any, partition: str = "Default") -> dict[str, Any]:
    return {"items": [{"queue": queue, "partition": partition, "payload": p} for p in payloads]}


async def close_all(group: list[httpx.AsyncClient]) -> None:
    for c in group:
        await c.aclose()


# -- rates ---------------------------------------------------------------------------------

async def test_requests_over_a_tenants_rate_are_answered_429_and_another_tenant_never_is(
        quotas_broker: BrokerProcess, operator: httpx.AsyncClient) -> None:
    slow, free = unique("slow"), unique("free")
    await set_quota(operator, slow, requestsPerSecond=5, requestBurst=5)
    slow_clients, free_clients = clients(quotas_broker, slow, 4), clients(quotas_broker, free, 4)
    try:
        started = time.monotonic()
        answers = await asyncio.gather(*(
            c.get("/api/v1/resources/queues") for _ in range(10)
            for c in [*slow_clients, *free_clients]))
        elapsed = time.monotonic() - started
    finally:
        await close_all(slow_clients + free_clients)
    mine = [a for i, a in enumerate(answers) if i % 8 < 4]
    theirs = [a for i, a in enumerate(answers) if i % 8 >= 4]
    assert all(a.status_code == 200 for a in theirs)
    admitted = sum(1 for a in mine if a.status_code == 200)
    refused = [a for a in mine if a.status_code == 429]
    assert admitted + len(refused) == 40 and refused
    # Each of the two workers admits half the burst and half the rate: the deployment
    # admits at most the burst plus the rate over the time taken (and one per worker for
    # the rounding of a share's burst up to a whole request).
    assert admitted <= 5 + 5 * elapsed + 2, (admitted, elapsed)
    for a in refused:
        assert a.json() == {"error": "request rate limit exceeded", "code": "rate_limited"}
        assert 1 <= int(a.headers["Retry-After"]) <= 60


async def test_a_refusal_is_held_so_a_client_ignoring_retry_after_is_refused_slowly(
        quotas_broker: BrokerProcess, operator: httpx.AsyncClient) -> None:
    """QUEEN_TENANT_REFUSAL_DELAY_MS (250 ms by default): a connection that sends again as
    soon as it is answered is refused at most four times a second."""
    tenant = unique("flood")
    await set_quota(operator, tenant, requestsPerSecond=1, requestBurst=1)
    [c] = clients(quotas_broker, tenant, 1)
    held: list[float] = []
    try:
        until = time.monotonic() + 1.5
        while time.monotonic() < until:
            started = time.monotonic()
            r = await c.get("/api/v1/resources/queues")
            if r.status_code == 429:
                held.append(time.monotonic() - started)
    finally:
        await c.aclose()
    assert held and min(held) >= 0.25, held
    assert len(held) <= 1.5 / 0.25 + 1


async def test_messages_over_a_tenants_rate_are_refused_whole(
        quotas_broker: BrokerProcess, operator: httpx.AsyncClient) -> None:
    tenant, queue = unique("msgs"), unique("q")
    await set_quota(operator, tenant, messagesPerSecond=1, messageBurst=20)
    [c] = clients(quotas_broker, tenant, 1)
    try:
        pushed = refused = 0
        for _ in range(6):  # each worker's share is a burst of 10: two pushes of 8 fill it
            r = await c.post("/api/v1/push", json=push_body(queue, *range(8)))
            if r.status_code == 201:
                pushed += 8
            else:
                assert r.status_code == 429, r.text
                assert r.json() == {"error": "message rate limit exceeded",
                                    "code": "rate_limited"}
                refused += 1
        assert refused >= 4 and pushed <= 16
        total = (await c.get(f"/api/v1/resources/queues/{queue}")).json()["totals"]["total"]
        assert total == pushed  # a refused push wrote nothing
    finally:
        await c.aclose()


# -- sizes and caps ------------------------------------------------------------------------

async def test_payload_and_batch_caps_are_413_payload_too_large(
        quotas_broker: BrokerProcess, operator: httpx.AsyncClient) -> None:
    tenant, queue = unique("size"), unique("q")
    await set_quota(operator, tenant, maxPayloadBytes=20, maxBatchSize=3)
    [c] = clients(quotas_broker, tenant, 1)
    try:
        r = await c.post("/api/v1/push", json=push_body(queue, 1, 2, 3, 4))
        assert r.status_code == 413 and r.json() == {
            "error": "batch of 4 items exceeds maxBatchSize (3)", "code": "payload_too_large"}
        r = await c.post("/api/v1/push", json=push_body(queue, 1, "x" * 30))
        assert r.status_code == 413
        assert r.json()["error"] == "item 1: payload 32 bytes exceeds maxPayloadBytes (20)"
        r = await c.post("/api/v1/transaction", json={"operations": [
            {"type": "push", "queue": queue, "payload": i} for i in range(4)]})
        assert r.status_code == 413 and r.json()["code"] == "payload_too_large"
        long_timer = base64.b64encode(b'"' + b"y" * 40 + b'"').decode()
        r = await c.post("/api/v1/timers", json={"operations": [
            {"op": "schedule", "queue": queue, "timerKey": "t", "delayMs": 60_000,
             "txn": "t", "payload": long_timer}]})
        assert r.status_code == 413 and r.json()["code"] == "payload_too_large"
        assert (await c.post("/api/v1/push", json=push_body(queue, 1, 2, 3))).status_code == 201
    finally:
        await c.aclose()


async def test_the_queue_cap_holds_exactly_across_processes(
        quotas_broker: BrokerProcess, operator: httpx.AsyncClient) -> None:
    tenant = unique("caps")
    await set_quota(operator, tenant, maxQueues=5)
    group = clients(quotas_broker, tenant, 6)
    names = [unique("q") for _ in range(30)]
    try:
        answers = await asyncio.gather(*(
            group[i % 6].post("/api/v1/push", json=push_body(name, i))
            for i, name in enumerate(names)))
        made = [n for n, a in zip(names, answers) if a.status_code == 201]
        refused = [a for a in answers if a.status_code == 403]
        assert len(made) == 5 and len(refused) == 25
        assert all(a.json() == {"error": "queue limit reached (5)", "code": "quota_exceeded"}
                   for a in refused)
        listed = (await group[0].get("/api/v1/resources/queues")).json()
        assert sorted(q["name"] for q in listed["queues"]) == sorted(made)
        r = await group[0].post("/api/v1/configure", json={"queue": unique("more")})
        assert r.status_code == 403 and r.json()["code"] == "quota_exceeded"
        assert (await group[1].post("/api/v1/push", json=push_body(made[0], 9))).status_code \
            == 201  # an existing queue takes writes
        r = await group[2].request("DELETE", f"/api/v1/resources/queues/{made[0]}")
        assert r.json()["deleted"] is True
        await asyncio.sleep(3 * REFRESH_S)  # the other worker's count is refreshed by then
        again = await asyncio.gather(*(c.post("/api/v1/push", json=push_body(unique("n"), 1))
                                       for c in group[:2]))
        assert sorted(a.status_code for a in again) == [201, 403]
    finally:
        await close_all(group)


async def test_the_partition_cap_holds_exactly_across_processes(
        quotas_broker: BrokerProcess, operator: httpx.AsyncClient) -> None:
    tenant, queue = unique("parts"), unique("q")
    await set_quota(operator, tenant, maxPartitionsPerQueue=3)
    group = clients(quotas_broker, tenant, 6)
    try:
        answers = await asyncio.gather(*(
            group[i % 6].post("/api/v1/push", json=push_body(queue, i, partition=f"p{i}"))
            for i in range(12)))
        assert sorted(a.status_code for a in answers) == [201] * 3 + [403] * 9
        assert {a.json()["error"] for a in answers if a.status_code == 403} == {
            "partition limit reached (3)"}
        parts = (await group[0].get(f"/api/v1/resources/queues/{queue}")).json()["partitions"]
        assert len(parts) == 3
    finally:
        await close_all(group)


async def test_the_retention_ceiling_refuses_longer_options_and_the_reaper_keeps_nothing_older(
        quotas_broker: BrokerProcess, operator: httpx.AsyncClient) -> None:
    tenant, queue = unique("ret"), unique("q")
    await set_quota(operator, tenant, maxRetentionSeconds=2)
    [c] = clients(quotas_broker, tenant, 1)
    [other] = clients(quotas_broker, unique("keeps"), 1)
    try:
        r = await c.post("/api/v1/configure", json={"queue": queue, "retentionEnabled": True,
                                                    "retentionSeconds": 3})
        assert r.status_code == 403 and r.json() == {
            "error": "retentionSeconds of 3s exceeds the tenant's maxRetentionSeconds (2s)",
            "code": "quota_exceeded"}
        r = await c.post("/api/v1/configure", json={"queue": queue, "retentionSeconds": 2})
        assert r.status_code == 200
        # No retention switched on: the ceiling deletes what is older all the same.
        for client in (c, other):
            assert (await client.post("/api/v1/push", json=push_body(queue, 1, 2))
                    ).status_code == 201
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            detail = (await c.get(f"/api/v1/resources/queues/{queue}")).json()
            if detail["totals"]["total"] == 0:
                break
            await asyncio.sleep(0.3)
        assert detail["totals"]["total"] == 0
        kept = (await other.get(f"/api/v1/resources/queues/{queue}")).json()
        assert kept["totals"]["total"] == 2  # another tenant's queue of that name keeps it
    finally:
        await c.aclose()
        await other.aclose()


async def test_parked_long_polls_beyond_the_cap_are_429(
        quotas_broker: BrokerProcess, operator: httpx.AsyncClient) -> None:
    tenant, queue = unique("parked"), unique("q")
    await set_quota(operator, tenant, maxParkedPops=2)
    group = clients(quotas_broker, tenant, 6)
    try:
        answers = await asyncio.gather(*(
            c.get(f"/api/v1/pop/queue/{queue}", params={"wait": "true", "timeout": "2000"})
            for c in group))
        parked = [a for a in answers if a.status_code == 204]
        refused = [a for a in answers if a.status_code == 429]
        # Each worker parks its share (1); at most the cap in all.
        assert len(parked) + len(refused) == 6 and 1 <= len(parked) <= 2
        for a in refused:
            assert a.json() == {"error": "too many parked consumers", "code": "rate_limited"}
            assert a.headers["Retry-After"] == "5"
    finally:
        await close_all(group)


# -- storage ---------------------------------------------------------------------------------

async def test_a_full_storage_quota_refuses_growing_writes_until_space_is_freed(
        quotas_broker: BrokerProcess, operator: httpx.AsyncClient) -> None:
    tenant, queue = unique("full"), unique("q")
    await set_quota(operator, tenant, maxStoredBytes=4000)
    [c] = clients(quotas_broker, tenant, 1)
    [other] = clients(quotas_broker, unique("roomy"), 1)
    noise = [base64.b64encode(os.urandom(3000)).decode() for _ in range(3)]
    try:
        assert (await c.post("/api/v1/push", json=push_body(queue, *noise))).status_code == 201
        blocked = await _until(lambda: c.post("/api/v1/push", json=push_body(queue, 1)), 403)
        assert blocked.json() == {"error": "storage quota exceeded; pushes blocked",
                                  "code": "storage_quota_exceeded"}
        r = await c.put(f"/api/v1/kv/{queue}/k", json={"value": 1, "forever": True})
        assert r.status_code == 403 and r.json()["code"] == "storage_quota_exceeded"
        r = await c.post("/api/v1/timers", json={"operations": [
            {"op": "schedule", "queue": queue, "timerKey": "t", "delayMs": 60_000, "txn": "t",
             "payload": base64.b64encode(b"1").decode()}]})
        assert r.status_code == 403 and r.json()["code"] == "storage_quota_exceeded"
        r = await c.post("/api/v1/transaction", json={"operations": [
            {"type": "push", "queue": queue, "payload": 1}]})
        assert r.status_code == 403 and r.json()["code"] == "storage_quota_exceeded"
        # Reading and deleting go on (they are how a tenant gets below its quota), and
        # another tenant writes as before.
        r = await c.get(f"/api/v1/pop/queue/{queue}", params={"wait": "false"})
        assert r.status_code == 200
        assert (await other.post("/api/v1/push", json=push_body(queue, 1))).status_code == 201
        r = await c.request("DELETE", f"/api/v1/resources/queues/{queue}")
        assert r.json()["deleted"] is True
        await _until(lambda: c.post("/api/v1/push", json=push_body(queue, 1)), 201)
        figures = (await operator.get(f"/api/v1/tenants/{tenant}")).json()
        assert figures["storedBytes"] < 4000
    finally:
        await c.aclose()
        await other.aclose()


async def _until(call: Any, status: int, seconds: float = 20) -> httpx.Response:
    """Call until the answer has `status` (the stored bytes are measured every
    QUEEN_TENANT_USAGE_INTERVAL_MS and read every QUEEN_TENANT_REFRESH_MS)."""
    deadline = time.monotonic() + seconds
    while True:
        answer: httpx.Response = await call()
        if answer.status_code == status or time.monotonic() > deadline:
            assert answer.status_code == status, answer.text
            return answer
        await asyncio.sleep(REFRESH_S)


# -- the admin API and the CLI ---------------------------------------------------------------

async def test_the_quota_api_takes_wire_names_refuses_wrong_ones_and_names_the_default(
        quotas_broker: BrokerProcess, operator: httpx.AsyncClient) -> None:
    tenant = unique("api")
    r = await operator.put(f"/api/v1/tenants/{tenant}/quota", json={"maxQueus": 1})
    assert r.status_code == 400 and "maxQueus" in r.json()["error"]
    r = await operator.put(f"/api/v1/tenants/{tenant}/quota", json={"maxQueues": 0})
    assert r.status_code == 400 and "maxQueues must be from 1" in r.json()["error"]
    r = await operator.put(f"/api/v1/tenants/{tenant}/quota",
                           json={"requestsPerSecond": 2.5, "maxStoredBytes": 2**40})
    body = r.json()
    assert r.status_code == 200 and body["tenant"] == tenant and body["path"] == tenant
    assert body["quota"]["requestsPerSecond"] == 2.5 and body["quota"]["maxQueues"] is None
    assert (await operator.get("/api/v1/tenants/_default")).json()["path"] == "_default"
    r = await operator.get("/api/v1/tenants/not%20a%20tenant")
    assert r.status_code == 400
    r = await operator.request("DELETE", f"/api/v1/tenants/{tenant}/quota")
    assert r.json() == {"tenant": tenant, "cleared": True}
    assert (await operator.get(f"/api/v1/tenants/{tenant}")).json()["quota"] is None


def test_the_tenants_commands_set_show_and_clear_a_quota(quotas_broker: BrokerProcess) -> None:
    tenant = unique("cli")
    env = {**os.environ, "QUEEN_URL": quotas_broker.url, "QUEEN_TOKEN": operator_token()}

    def cli(*args: str) -> str:
        done = subprocess.run([PYTHON, "-m", "broker.cli", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = cli("tenants", "set", tenant, "--max-queues", "3", "--requests-per-second", "50")
    assert "max-queues" in out and "3" in out
    out = cli("tenants", "set", tenant, "--max-queues", "none")  # the rate stays
    shown = cli("tenants", "show", tenant, "--json")
    assert '"requestsPerSecond": 50.0' in shown and '"maxQueues": null' in shown
    # An unset burst is shown as what it is: twice the rate.
    lines = {line.split("  ")[0]: line.split("  ", 1)[1].strip()
             for line in cli("tenants", "show", tenant).splitlines() if "  " in line}
    assert lines["requests-per-second"] == "50"
    assert lines["request-burst"] == "100 (twice the rate)"
    assert lines["max-queues"] == "unlimited"
    assert tenant in cli("tenants", "list")
    assert "quota removed" in cli("tenants", "clear", tenant)
    # A tenant's own admin is no operator: exit status 5 (refused).
    bound = subprocess.run([PYTHON, "-m", "broker.cli", "tenants", "list"], cwd=ROOT,
                           env={**env, "QUEEN_TOKEN": tenant_token(tenant)},
                           capture_output=True, text=True, timeout=60, check=False)
    assert bound.returncode == 5 and "403" in bound.stderr
