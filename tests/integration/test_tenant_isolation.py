"""Two tenants, one name: every route family keeps them apart (docs/security/tenants.md).

Tenants `acme` and `globex` get tokens with a tenant claim (admins of their tenant, so every
route but the operator's is theirs to call); `op` is an admin without a claim: the operator,
acting in the default tenant, which uses the same names as well. Each family is driven with
the same names by each tenant, and each must see only its own. A tenant that names another
tenant's queue, partition id, lease, dead letter, query or ephemeral queue gets exactly the
answer it gets for one that does not exist (`same_as_unknown`): nothing tells it the other
exists.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import BrokerProcess, create_database
from tests.tokens import AUTH_ENV, AUTH_SECRET, Signer, bearer

SIGNER = Signer(AUTH_SECRET, "HS256")
ACME, GLOBEX = "acme", "globex"
G = "/api/v1/consumer-groups"
EPH = "/api/v1/ephemeral"


@pytest.fixture(scope="module")
async def tenants_database(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def tenants_broker(tenants_database: str) -> Iterator[BrokerProcess]:
    # Every path needs a token here, the metrics too: a tenant's scrape is then its own.
    env = {**AUTH_ENV, "JWT_SKIP_PATHS": "/health"}
    with BrokerProcess(tenants_database, workers=2, env=env) as proc:
        yield proc


def _client(broker: BrokerProcess, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=broker.url, timeout=30, headers=bearer(token))


@pytest.fixture
async def acme(tenants_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(tenants_broker, SIGNER.token("a", role="admin", tenant=ACME)) as c:
        yield c


@pytest.fixture
async def globex(tenants_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(tenants_broker, SIGNER.token("g", role="admin", tenant=GLOBEX)) as c:
        yield c


@pytest.fixture
async def operator(tenants_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(tenants_broker, SIGNER.token("op", role="admin")) as c:
        yield c


@pytest.fixture
async def db(tenants_database: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(tenants_database)
    try:
        yield conn
    finally:
        await conn.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def push(c: httpx.AsyncClient, queue: str, *payloads: Any, partition: str = "Default",
               txid: str | None = None) -> list[dict[str, Any]]:
    r = await c.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": partition, "payload": p,
         **({"transactionId": txid} if txid else {})} for p in payloads]})
    assert r.status_code == 201, r.text
    assert all(i["status"] == "queued" for i in r.json()), r.text
    return r.json()  # type: ignore[no-any-return]


async def pop(c: httpx.AsyncClient, queue: str, **params: str) -> dict[str, Any] | None:
    r = await c.get(f"/api/v1/pop/queue/{queue}", params={"wait": "false", "batch": "100",
                                                          **params})
    if r.status_code == 204:
        return None
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


_VOLATILE = ("transactionId", "createdAt", "timestamp", "id", "safeTime", "updated_at",
             "traceId", "messageId", "from", "to")


def normalized(r: httpx.Response, *names: str) -> tuple[int, Any]:
    """An answer with the names it echoes replaced by `<name>` (so a foreign name and an
    unknown one compare), and the fields minted per call blanked."""
    text = r.text
    for n in names:
        text = text.replace(n, "<name>")
    try:
        body: Any = json.loads(text) if text else None
    except ValueError:
        body = text
    return r.status_code, _blank(body)


def _blank(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("*" if k in _VOLATILE else _blank(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_blank(v) for v in value]
    return value


def same_as_unknown(foreign: httpx.Response, unknown: httpx.Response, foreign_name: str,
                    unknown_name: str) -> None:
    """The answer to another tenant's name is the answer to a name nobody has."""
    assert normalized(foreign, foreign_name) == normalized(unknown, unknown_name), (
        foreign.text, unknown.text)


# -- queues and the message plane ------------------------------------------------------------

async def test_one_queue_name_is_three_queues_for_three_tenants(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient,
        operator: httpx.AsyncClient) -> None:
    queue = unique("orders")
    for client, who in ((acme, ACME), (globex, GLOBEX), (operator, "default")):
        await push(client, queue, {"by": who}, {"by": who})
    for client, who in ((acme, ACME), (globex, GLOBEX), (operator, "default")):
        popped = await pop(client, queue)
        assert popped is not None
        assert [m["data"] for m in popped["messages"]] == [{"by": who}, {"by": who}]
        r = await client.get("/api/v1/resources/queues", params={"search": queue})
        [row] = r.json()["queues"]
        assert (row["name"], row["messages"]["total"]) == (queue, 2)
    assert await pop(acme, queue) is None  # each popped only its own two


async def test_discovery_pops_and_offset_reads_stay_in_the_tenant(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient) -> None:
    ns = unique("ns")
    await push(acme, f"{ns}.work.a", "acme")
    await push(globex, f"{ns}.work.b", "globex")
    r = await globex.get("/api/v1/pop", params={"namespace": ns, "wait": "false",
                                                "batch": "10"})
    assert r.status_code == 200 and [m["data"] for m in r.json()["messages"]] == ["globex"]
    r = await globex.get("/api/v1/pop", params={"namespace": ns, "wait": "false"})
    assert r.status_code == 204  # acme's queue of the namespace is not globex's
    fetched = await globex.post("/api/v1/fetch", json={"entries": [
        {"queue": f"{ns}.work.a", "partition": "Default", "offset": 0}]})
    unknown = await globex.post("/api/v1/fetch", json={"entries": [
        {"queue": f"{ns}.work.zz", "partition": "Default", "offset": 0}]})
    same_as_unknown(fetched, unknown, f"{ns}.work.a", f"{ns}.work.zz")
    assert fetched.json()["entries"][0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    mine = await acme.post("/api/v1/fetch", json={"entries": [
        {"queue": f"{ns}.work.a", "partition": "Default", "offset": 0}]})
    assert [r["payload"] for r in mine.json()["entries"][0]["records"]] == ["acme"]
    changed = await globex.post("/api/v1/partitions/changed",
                                json={"entries": [{"queue": f"{ns}.work.a"}]})
    unknown = await globex.post("/api/v1/partitions/changed",
                                json={"entries": [{"queue": f"{ns}.work.zz"}]})
    same_as_unknown(changed, unknown, f"{ns}.work.a", f"{ns}.work.zz")


async def test_another_tenants_queue_is_answered_as_one_that_does_not_exist(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient) -> None:
    mine, nobody = unique("secret"), unique("nobody")
    await push(acme, mine, 1)
    await acme.post("/api/v1/configure", json={"queue": mine, "leaseTime": 60})
    probes = [
        ("GET", "/api/v1/resources/queues/{q}", None),
        ("GET", "/api/v1/resources/queues/{q}/depth", None),
        ("GET", "/api/v1/status/queues/{q}", None),
        ("GET", "/api/v1/status/queues/{q}/messages", None),
        ("GET", "/api/v1/resources/partitions?queue={q}", None),
        ("GET", "/api/v1/messages?queue={q}", None),
        ("GET", "/api/v1/dlq?queue={q}", None),
        ("GET", "/api/v1/pop/queue/{q}?wait=false", None),
        ("GET", "/api/v1/pop/queue/{q}/partition/Default?wait=false", None),
        ("POST", G + "/g/queues/{q}/seek", {"toEnd": True}),
        ("POST", G + "/g/queues/{q}/partitions/Default/seek", {"toEnd": True}),
        ("DELETE", G + "/g/queues/{q}", None),
        ("DELETE", "/api/v1/dlq?queue={q}", None),
        ("GET", "/api/v1/status?queue={q}", None),
        ("GET", "/api/v1/status/analytics?queue={q}", None),
        ("DELETE", "/api/v1/resources/queues/{q}", None),
    ]
    for method, template, body in probes:
        answers = []
        for name in (mine, nobody):
            answers.append(await globex.request(method, template.format(q=name), json=body))
        same_as_unknown(answers[0], answers[1], mine, nobody)
    # ... and acme's queue is untouched by all that
    popped = await pop(acme, mine)
    assert popped is not None and [m["data"] for m in popped["messages"]] == [1]


async def test_addresses_of_another_tenants_partitions_lease_and_messages_are_unknown(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    queue = unique("addr")
    await push(acme, queue, {"n": 1}, txid="t1")
    await push(globex, queue, {"n": 2}, txid="t1")  # the same name and transactionId
    popped = await pop(acme, queue, consumerGroup="g")
    assert popped is not None
    pid, lease = popped["messages"][0]["partitionId"], popped["leaseId"]
    nobody = str(int(await db.fetchval("SELECT max(id) FROM queen.log_partitions")) + 10_000)
    fake_lease = str(uuid.uuid4())

    async def both(method: str, template: str, body: Any = None) -> None:
        out = []
        for p in (pid, nobody):
            payload = json.loads(json.dumps(body).replace("{pid}", p)) if body else None
            out.append(await globex.request(method, template.format(pid=p), json=payload))
        same_as_unknown(out[0], out[1], pid, nobody)

    await both("POST", "/api/v1/ack", {"transactionId": "t1", "partitionId": "{pid}",
                                       "consumerGroup": "g", "status": "completed"})
    await both("POST", "/api/v1/ack/batch", {"consumerGroup": "g", "acknowledgments": [
        {"transactionId": "t1", "partitionId": "{pid}", "status": "failed"}]})
    await both("POST", "/api/v1/transaction", {"operations": [
        {"type": "ack", "transactionId": "t1", "partitionId": "{pid}", "consumerGroup": "g"}]})
    await both("GET", "/api/v1/messages/{pid}/t1")
    await both("POST", "/api/v1/messages/{pid}/t1/retry")
    await both("DELETE", "/api/v1/messages/{pid}/t1")
    await both("GET", "/api/v1/traces/{pid}/t1")
    await both("POST", "/api/v1/traces", {"partitionId": "{pid}", "transactionId": "t1",
                                          "consumerGroup": "g", "data": {"x": 1}})
    extended = await globex.post(f"/api/v1/lease/{lease}/extend", json={"seconds": 600})
    unknown = await globex.post(f"/api/v1/lease/{fake_lease}/extend", json={"seconds": 600})
    same_as_unknown(extended, unknown, lease, fake_lease)
    # Nothing of acme's moved: its lease stands, and its ack applies.
    r = await acme.post("/api/v1/ack", json={"transactionId": "t1", "partitionId": pid,
                                             "consumerGroup": "g", "leaseId": lease})
    assert r.status_code == 200 and r.json()[0]["success"] is True, r.text
    assert (await acme.get(f"/api/v1/messages/{pid}/t1")).status_code == 200


async def test_dead_letters_are_the_tenants_own(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    queue = unique("dlq")
    await acme.post("/api/v1/configure", json={"queue": queue, "retryLimit": 0})
    await globex.post("/api/v1/configure", json={"queue": queue, "retryLimit": 0})
    for client in (acme, globex):
        await push(client, queue, {"dead": True}, txid="d1")
        popped = await pop(client, queue, consumerGroup="g")
        assert popped is not None
        m = popped["messages"][0]
        r = await client.post("/api/v1/ack", json={
            "transactionId": "d1", "partitionId": m["partitionId"], "consumerGroup": "g",
            "status": "dlq", "error": "boom", "leaseId": popped["leaseId"]})
        assert r.json()[0]["success"] is True, r.text
    a_rows = (await acme.get("/api/v1/dlq", params={"queue": queue})).json()
    g_rows = (await globex.get("/api/v1/dlq", params={"queue": queue})).json()
    assert a_rows["total"] == 1 and g_rows["total"] == 1
    assert a_rows["messages"][0]["id"] != g_rows["messages"][0]["id"]
    everything = (await globex.get("/api/v1/dlq", params={"limit": 1000})).json()
    assert a_rows["messages"][0]["id"] not in {m["id"] for m in everything["messages"]}
    acme_id = a_rows["messages"][0]["id"]
    nobody = str(int(await db.fetchval("SELECT max(id) FROM queen.log_dlq")) + 10_000)
    replayed = await globex.post(f"/api/v1/dlq/{acme_id}/replay", json={})
    unknown = await globex.post(f"/api/v1/dlq/{nobody}/replay", json={})
    same_as_unknown(replayed, unknown, acme_id, nobody)
    assert replayed.status_code == 404
    r = await globex.request("DELETE", "/api/v1/dlq", params={"queue": queue})
    assert r.json()["deleted"] == 1  # globex's own
    assert (await acme.get("/api/v1/dlq", params={"queue": queue})).json()["total"] == 1
    r = await acme.post(f"/api/v1/dlq/{acme_id}/replay", json={})
    assert r.status_code == 200 and r.json()["result"] == "moved"


async def test_consumer_groups_of_one_name_are_the_tenants_own(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient) -> None:
    queue, group = unique("cg"), unique("grp")
    for client in (acme, globex):
        await push(client, queue, 1, 2, 3)
    popped = await pop(acme, queue, consumerGroup=group, batch="1")
    assert popped is not None
    await acme.post("/api/v1/ack", json={"transactionId": popped["messages"][0]["transactionId"],
                                         "partitionId": popped["messages"][0]["partitionId"],
                                         "consumerGroup": group,
                                         "leaseId": popped["leaseId"]})
    assert await pop(globex, queue, consumerGroup=group, batch="3") is not None

    async def detail(c: httpx.AsyncClient) -> dict[str, Any]:
        r = await c.get(f"{G}/{group}")
        assert r.status_code == 200
        return r.json()  # type: ignore[no-any-return]

    a, g = await detail(acme), await detail(globex)
    assert a[queue]["partitions"][0]["committedOffset"] == 0
    assert g[queue]["partitions"][0]["committedOffset"] == -1  # leased, not acked
    assert [s["queueName"] for s in (await acme.get(G)).json() if s["name"] == group] == [queue]
    lagging = (await globex.get(f"{G}/lagging", params={"minLagSeconds": 0})).json()
    assert all(e["queue_name"] != queue or e["consumer_group"] == group for e in lagging)
    r = await globex.post(f"{G}/{group}/queues/{queue}/seek", json={"toEnd": True})
    assert r.json()["partitionsUpdated"] == 1
    assert (await detail(acme))[queue]["partitions"][0]["committedOffset"] == 0
    r = await globex.post(f"{G}/{group}/subscription",
                          json={"subscriptionTimestamp": "2020-01-01T00:00:00Z"})
    assert r.status_code == 200
    r = await globex.request("DELETE", f"{G}/{group}")
    assert r.json()["deletedPartitions"] == 1
    assert (await detail(acme))[queue]["partitions"][0]["committedOffset"] == 0
    assert queue not in await detail(globex)


async def test_traces_names_are_the_tenants_own(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient) -> None:
    queue, name = unique("tr"), unique("story")
    for client, who in ((acme, ACME), (globex, GLOBEX)):
        [item] = await push(client, queue, {"who": who}, txid="t")
        r = await client.post("/api/v1/traces", json={
            "partitionId": item["partition_id"], "transactionId": "t", "consumerGroup": "g",
            "data": {"by": who}, "traceNames": [name] if who == ACME else []})
        assert r.status_code == 201, r.text
    mine = (await acme.get(f"/api/v1/traces/by-name/{name}")).json()
    theirs = (await globex.get(f"/api/v1/traces/by-name/{name}")).json()
    assert mine["total"] == 1 and theirs == {**theirs, "traces": [], "total": 0}
    names = (await globex.get("/api/v1/traces/names", params={"search": name})).json()
    assert names["trace_names"] == [] and names["total"] == 0


async def test_namespaces_tasks_overview_status_and_analytics_are_the_tenants_own(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient,
        operator: httpx.AsyncClient) -> None:
    ns = unique("only-acme")
    await push(acme, f"{ns}.job.q", 1, 2)
    spaces = (await globex.get("/api/v1/resources/namespaces")).json()["namespaces"]
    assert ns not in {n["namespace"] for n in spaces}
    assert ns in {n["namespace"] for n in
                  (await acme.get("/api/v1/resources/namespaces")).json()["namespaces"]}
    a_overview = (await acme.get("/api/v1/resources/overview")).json()
    o_overview = (await operator.get("/api/v1/resources/overview")).json()
    assert a_overview["queues"] >= 1 and a_overview != o_overview
    status = (await globex.get("/api/v1/status", params={"namespace": ns})).json()
    assert status["queues"] == 0 and status["messages"]["total"] == 0
    # A sample is the operator's to take (OPERATOR); a tenant's admin may not.
    assert (await acme.post("/api/v1/stats/refresh")).status_code == 403
    assert (await operator.post("/api/v1/stats/refresh")).status_code == 200
    series = (await globex.get("/api/v1/status/analytics",
                               params={"namespace": ns, "interval": "minute"})).json()
    assert sum(b["pushed"] + b["depth"] for b in series["buckets"]) == 0
    series = (await acme.get("/api/v1/status/analytics",
                             params={"namespace": ns, "interval": "minute"})).json()
    assert sum(b["depth"] for b in series["buckets"]) == 2



async def test_the_analytics_family_is_the_tenants_own_and_the_operators_labels_it(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient,
        operator: httpx.AsyncClient) -> None:
    """`/api/v1/analytics/*`: a tenant's queue series are its queues'; the operator naming
    no tenant sees every tenant's; a named tenant's series are labelled with it (as on
    /metrics/prometheus); the processes' figures are the operator's alone."""
    queue, only_acme = unique("ana"), unique("ana-acme")
    for client in (acme, globex, operator):
        await push(client, queue, 1)
    await push(acme, only_acme, 1, 2)
    assert (await operator.post("/api/v1/stats/refresh")).status_code == 200

    async def ops(c: httpx.AsyncClient) -> set[tuple[str, str | None]]:
        r = await c.get("/api/v1/analytics/queue-ops")
        assert r.status_code == 200, r.text
        return {(s["queueName"], s.get("tenant")) for s in r.json()["series"]
                if s["queueName"] in (queue, only_acme)}

    assert await ops(acme) == {(queue, ACME), (only_acme, ACME)}
    assert await ops(globex) == {(queue, GLOBEX)}
    assert await ops(operator) == {(queue, None), (queue, ACME), (queue, GLOBEX),
                                   (only_acme, ACME)}
    # Asking for another tenant's queue by name finds nothing, as for an unknown name.
    for path in ("queue-lag", "queue-ops", "retention"):
        r = await globex.get(f"/api/v1/analytics/{path}", params={"queue": only_acme})
        unknown = await globex.get(f"/api/v1/analytics/{path}",
                                   params={"queue": unique("never")})
        assert normalized(r, only_acme) == normalized(unknown, only_acme.split("-")[0])
    lag = (await globex.get("/api/v1/analytics/queue-lag")).json()
    assert {p["queueName"] for p in lag} & {only_acme} == set()
    assert {p["tenant"] for p in lag} == {GLOBEX}
    labelled = (await operator.get("/api/v1/analytics/queue-lag",
                                   params={"queue": queue})).json()
    assert {p.get("tenant") for p in labelled} == {None, ACME, GLOBEX}
    # The processes' figures: the operator's; a tenant gets none of them.
    assert (await operator.get("/api/v1/analytics/system-metrics")).json()["replicaCount"] >= 1
    mine = (await acme.get("/api/v1/analytics/system-metrics")).json()
    assert mine["replicas"] == [] and mine["replicaCount"] == 0
    workers = (await acme.get("/api/v1/analytics/worker-metrics")).json()
    assert workers["timeSeries"] == [] and workers["workers"] == []
    assert set(workers["summary"].values()) == {None}
    assert {q["queueName"] for q in workers["queues"]} >= {queue, only_acme}
    assert {q["tenant"] for q in workers["queues"]} == {ACME}
    everyone = (await operator.get("/api/v1/analytics/worker-metrics")).json()
    assert everyone["summary"]["processes"] >= 1
    assert {(q["queueName"], q.get("tenant")) for q in everyone["queues"]
            if q["queueName"] == queue} == {(queue, None), (queue, ACME), (queue, GLOBEX)}


# -- ephemeral queues, KV, locks, timers, streams --------------------------------------------

async def test_ephemeral_queues_of_one_name_are_the_tenants_own(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient) -> None:
    queue, only, nobody = unique("eph"), unique("eph-acme"), unique("eph-nobody")
    r = await acme.post(EPH + "/configure", json={"queue": only})
    assert r.status_code == 201, r.text
    for client, who in ((acme, ACME), (globex, GLOBEX)):
        r = await client.post(EPH + "/push", json={"queue": queue,
                                                   "messages": [{"payload": who}]})
        assert r.status_code == 201, r.text
    popped = (await acme.get(EPH + "/pop", params={"queue": queue, "batch": 10})).json()
    assert [m["payload"] for m in popped["messages"]] == [ACME]
    listed = (await globex.get(EPH + "/queues")).json()
    assert [q["depth"] for q in listed["queues"] if q["queue"] == queue] == [1]
    acme_id = popped["messages"][0]["id"]
    acked = await globex.post(EPH + "/ack", json={"queue": queue, "acks": [{"id": acme_id}]})
    head, _, seq = acme_id.rpartition(":")
    made_up = f"{head}:{int(seq) + 1_000_000}"  # the same form, a message nobody has
    unknown = await globex.post(EPH + "/ack", json={"queue": queue, "acks": [{"id": made_up}]})
    same_as_unknown(acked, unknown, acme_id, made_up)
    for method, path, body in (("GET", EPH + "/queues/{q}/depth", None),
                               ("POST", EPH + "/reset", {"queue": "{q}"}),
                               ("DELETE", EPH + "/queue/{q}", None)):
        out = []
        for name in (only, nobody):
            payload = json.loads(json.dumps(body).replace("{q}", name)) if body else None
            out.append(await globex.request(method, path.format(q=name), json=payload))
        same_as_unknown(out[0], out[1], only, nobody)
    assert only in {q["queue"] for q in (await acme.get(EPH + "/queues")).json()["queues"]}
    popped = (await globex.get(EPH + "/pop", params={"queue": queue, "batch": 10})).json()
    assert [m["payload"] for m in popped["messages"]] == [GLOBEX]
    r = await acme.post(EPH + "/ack", json={"queue": queue, "acks": [{"id": acme_id}]})
    assert r.json()["results"][0]["outcome"] == "acked"


async def test_kv_namespaces_and_locks_are_the_tenants_own(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient) -> None:
    ns = unique("config")
    for client, who in ((acme, ACME), (globex, GLOBEX)):
        r = await client.put(f"/api/v1/kv/{ns}/flag", json={"value": who, "forever": True})
        assert r.status_code == 200 and r.json()["applied"] is True, r.text
    assert (await acme.get(f"/api/v1/kv/{ns}/flag")).json()["value"] == ACME
    assert (await globex.get(f"/api/v1/kv/{ns}/flag")).json()["value"] == GLOBEX
    only_acme = unique("acme-only")
    await acme.put(f"/api/v1/kv/{only_acme}/k", json={"value": 1, "forever": True})
    r = await globex.post("/api/v1/kv", json={"operations": [
        {"op": "get", "ns": only_acme, "key": "k"},
        {"op": "getPrefix", "ns": only_acme, "prefix": "k", "limit": 10}]})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["found"] is False and r.json()["results"][1]["rows"] == []
    spaces = (await globex.get("/api/v1/resources/kv-namespaces")).json()["rows"]
    assert only_acme not in {n["ns"] for n in spaces}
    lock = unique("leader")
    for client in (acme, globex):  # one lock name, one holder per tenant
        r = await client.post("/api/v1/locks", json={"operations": [
            {"op": "acquire", "name": lock, "ttlSeconds": 60, "owner": "me"}]})
        assert r.json()["results"][0]["acquired"] is True, r.text
    r = await acme.post("/api/v1/locks", json={"operations": [
        {"op": "acquire", "name": lock, "ttlSeconds": 60, "owner": "someone-else"}]})
    assert r.json()["results"][0]["acquired"] is False


async def test_timers_are_the_tenants_own(acme: httpx.AsyncClient,
                                         globex: httpx.AsyncClient) -> None:
    queue, nobody = unique("tq"), unique("tq-nobody")
    for client, who in ((acme, ACME), (globex, GLOBEX)):
        payload = base64.b64encode(json.dumps(who).encode()).decode()
        r = await client.post("/api/v1/timers", json={"operations": [
            {"op": "schedule", "queue": queue, "timerKey": "k", "delayMs": 3_600_000,
             "txn": f"t-{who}", "payload": payload}]})
        assert r.json()["results"][0]["status"] == "scheduled", r.text
    a = (await acme.get(f"/api/v1/timers/{queue}/k")).json()
    g = (await globex.get(f"/api/v1/timers/{queue}/k")).json()
    assert (a["txn"], g["txn"]) == ("t-acme", "t-globex")
    only = unique("tq-acme")
    await acme.post("/api/v1/timers", json={"operations": [
        {"op": "schedule", "queue": only, "timerKey": "k", "delayMs": 3_600_000, "txn": "t",
         "payload": base64.b64encode(b"1").decode()}]})
    for method, template in (("GET", "/api/v1/timers/{q}/k"), ("GET", "/api/v1/timers/{q}"),
                             ("GET", "/api/v1/timers/{q}?mode=count&prefix=k"),
                             ("DELETE", "/api/v1/timers/{q}/k")):
        out = [await globex.request(method, template.format(q=q)) for q in (only, nobody)]
        same_as_unknown(out[0], out[1], only, nobody)
    queues = (await globex.get("/api/v1/timers", params={"limit": 1000})).json()
    assert only not in {q["queue"] for q in queues["queues"]}
    assert (await acme.get(f"/api/v1/timers/{only}/k")).json()["found"] is True


async def test_stream_queries_of_one_name_are_the_tenants_own(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient) -> None:
    name = unique("agg")
    ids = {}
    for client, who in ((acme, ACME), (globex, GLOBEX)):
        r = await client.post("/streams/v1/queries", json={
            "name": name, "source_queue": name, "sink_queue": name + "-sink",
            "config_hash": f"hash-{who}"})
        assert r.status_code == 200 and r.json()["fresh"] is True, r.text  # no conflict
        ids[who] = r.json()["query_id"]
    assert ids[ACME] != ids[GLOBEX]
    listed = (await globex.get("/streams/v1/queries")).json()["queries"]
    assert [q["queryId"] for q in listed if q["name"] == name] == [ids[GLOBEX]]
    [item] = await push(acme, name, {"x": 1})
    popped = await pop(acme, name, consumerGroup=f"streams.{name}")
    assert popped is not None
    pid = item["partition_id"]
    cycle = {"partition_id": pid, "consumer_group": f"streams.{name}",
             "state_ops": [{"type": "upsert", "key": "k", "value": {"n": 1}}]}
    fake = str(uuid.uuid4())
    out = [await globex.post("/streams/v1/cycle", json={**cycle, "query_id": q})
           for q in (ids[ACME], fake)]
    same_as_unknown(out[0], out[1], ids[ACME], fake)
    assert out[0].json()["error"] == "query not found"
    r = await acme.post("/streams/v1/cycle", json={**cycle, "query_id": ids[ACME]})
    assert r.json()["success"] is True, r.text
    state = {"query_id": ids[ACME], "partition_id": pid}
    out = [await globex.post("/streams/v1/state/get", json={**state, "query_id": q})
           for q in (ids[ACME], fake)]
    same_as_unknown(out[0], out[1], ids[ACME], fake)
    assert len((await acme.post("/streams/v1/state/get", json=state)).json()["rows"]) == 1
    only = unique("agg-acme")
    await acme.post("/streams/v1/queries", json={"name": only, "source_queue": only,
                                                 "config_hash": "h"})
    nobody = unique("agg-nobody")
    out = [await globex.request("DELETE", f"/streams/v1/queries/{q}") for q in (only, nobody)]
    same_as_unknown(out[0], out[1], only, nobody)
    assert only in {q["name"] for q in (await acme.get("/streams/v1/queries")).json()["queries"]}


# -- metrics, operator routes, and who may name a tenant --------------------------------------

async def test_a_tenants_metrics_are_its_own_and_the_operators_label_them(
        acme: httpx.AsyncClient, globex: httpx.AsyncClient,
        operator: httpx.AsyncClient) -> None:
    queue = unique("met")
    for client in (acme, globex, operator):
        await push(client, queue, 1)

    async def lag_series(c: httpx.AsyncClient) -> dict[tuple[str, ...], float]:
        text = (await c.get("/metrics/prometheus")).text
        found = {}
        for family in text_string_to_metric_families(text):
            if family.name == "queen_queue_pop_lag_milliseconds":
                for s in family.samples:
                    if s.labels["queue"] == queue:
                        found[tuple(sorted(s.labels.items()))] = s.value
        return found

    assert list(await lag_series(acme)) == [(("queue", queue), ("tenant", ACME))]
    assert set(await lag_series(operator)) == {
        (("queue", queue),), (("queue", queue), ("tenant", ACME)),
        (("queue", queue), ("tenant", GLOBEX))}
    text = (await acme.get("/metrics/prometheus")).text
    assert "queen_db_pool_size" not in text and "queen_cluster_requests_total" not in text
    assert "queen_db_replication_standbys" not in text  # the database server's, not acme's
    mine = (await acme.get("/metrics")).json()
    assert mine["tenant"] == ACME and "pid" not in mine
    assert "pid" in (await operator.get("/metrics")).json()


async def test_operator_routes_refuse_a_token_bound_to_a_tenant(
        acme: httpx.AsyncClient, operator: httpx.AsyncClient) -> None:
    for method, path, body in (("GET", "/api/v1/tenants", None),
                               ("GET", "/api/v1/system/maintenance", None),
                               ("POST", "/api/v1/system/maintenance/pop", {"enabled": False}),
                               ("PUT", f"/api/v1/tenants/{ACME}/quota", {"maxQueues": 1})):
        r = await acme.request(method, path, json=body)
        assert r.status_code == 403 and "operator" in r.json()["error"], r.text
    r = await operator.get("/api/v1/tenants")
    assert r.status_code == 200
    assert {ACME, GLOBEX, ""} <= {t["tenant"] for t in r.json()["tenants"]}


async def test_only_a_trusted_proxy_or_an_admin_names_a_tenant_with_the_header(
        tenants_broker: BrokerProcess, acme: httpx.AsyncClient,
        operator: httpx.AsyncClient) -> None:
    queue = unique("hdr")
    await push(acme, queue, "acme's")
    # A token bound to acme may not name another tenant, nor may a writer without a claim.
    r = await acme.get("/api/v1/resources/queues", headers={"x-queen-tenant": GLOBEX})
    assert r.status_code == 403 and "bound to tenant 'acme'" in r.json()["error"]
    async with _client(tenants_broker, SIGNER.token("w", role="read-write")) as writer:
        r = await writer.get("/api/v1/resources/queues", headers={"x-queen-tenant": ACME})
        assert r.status_code == 403 and "trusted proxy or an admin token" in r.json()["error"]
    r = await operator.get("/api/v1/resources/queues", headers={"x-queen-tenant": "a b"})
    assert r.status_code == 400 and "invalid x-queen-tenant header" in r.json()["error"]
    # The operator acting for acme sees acme's queue, and its own default tenant does not.
    r = await operator.get("/api/v1/resources/queues", params={"search": queue},
                           headers={"x-queen-tenant": ACME})
    assert [q["name"] for q in r.json()["queues"]] == [queue]
    r = await operator.get("/api/v1/resources/queues", params={"search": queue})
    assert r.json()["queues"] == []


async def test_a_tenant_claim_that_names_no_tenant_is_refused(
        tenants_broker: BrokerProcess) -> None:
    async with _client(tenants_broker, SIGNER.token("x", role="admin", tenant="a b")) as bad:
        r = await bad.get("/api/v1/resources/queues")
    assert r.status_code == 401 and re.search("claim 'tenant' is not a tenant", r.text)


# -- a trusted proxy in front of a broker with auth off ------------------------------------

@pytest.fixture(scope="module")
def proxied_broker(tenants_database: str) -> Iterator[BrokerProcess]:
    env = {"QUEEN_TENANT_TRUSTED_PROXIES": "127.0.0.1/32"}
    with BrokerProcess(tenants_database, workers=1, env=env) as proc:
        yield proc


async def test_behind_a_trusted_proxy_its_header_binds_the_request(
        proxied_broker: BrokerProcess) -> None:
    queue = unique("proxied")
    async with httpx.AsyncClient(base_url=proxied_broker.url, timeout=30) as http:
        for tenant in (ACME, GLOBEX):
            r = await http.post("/api/v1/push", headers={"x-queen-tenant": tenant}, json={
                "items": [{"queue": queue, "payload": tenant}]})
            assert r.status_code == 201
        r = await http.get(f"/api/v1/pop/queue/{queue}", params={"wait": "false"},
                           headers={"x-queen-tenant": GLOBEX})
        assert [m["data"] for m in r.json()["messages"]] == [GLOBEX]
        r = await http.get("/api/v1/system/maintenance", headers={"x-queen-tenant": GLOBEX})
        assert r.status_code == 403  # a tenant behind the proxy is no operator
        assert (await http.get("/api/v1/system/maintenance")).status_code == 200
        r = await http.get(f"/api/v1/pop/queue/{queue}", params={"wait": "false"})
        assert r.status_code == 204  # the default tenant has no such queue
