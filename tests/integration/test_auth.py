"""JWT auth end to end (wire-protocol §9): real brokers with auth on, real tokens signed here.

- every route, without a token, with a token below its level, and as admin;
- the 401 reasons over HTTP; skip paths; a refusal never wedges a kept-alive connection;
- producerSub stamped from the token (push, transaction), stored in the segment frame,
  returned by pop, fetch, DLQ and message detail, never taken from the body;
- the official client with `bearer_token=`; RS256 with a PEM key; EdDSA and RS256 from a JWKS
  served on 127.0.0.1, with a key rotation and the JWKS going down;
- start-up refusals of `serve`.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from queen import Queen

from broker.auth.access import Access
from broker.table import ENDPOINTS
from core import segments
from core.auth_settings import DEFAULT_SKIP_PATHS
from tests.integration.test_wire_edge import raw_exchange, status_of
from tests.support import PYTHON, ROOT, BrokerProcess, fetch_records, free_port
from tests.tokens import (
    AUDIENCE,
    AUTH_SECRET,
    ISSUER,
    JwksServer,
    Signer,
    bearer,
    ed_key,
    public_jwk,
    public_pem,
    rsa_key,
    unsigned_token,
)

SECRET = AUTH_SECRET
HS = Signer(SECRET, "HS256")


@pytest.fixture
async def anon(auth_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=auth_broker.url, timeout=30) as client:
        yield client


@pytest.fixture
async def admin(auth_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=auth_broker.url, timeout=30,
                                 headers=bearer(HS.token("root", role="admin"))) as client:
        yield client


# --- every route at its level ------------------------------------------------------------

def _concrete(path: str, queue: str) -> str:
    return (path.replace("{queue}", queue).replace("{partition}", "p")
            .replace("{group}", "g").replace("{leaseId}", "0190d5b6-7f5e-7000-8000-000000000000")
            .replace("{partitionId}", "1").replace("{transactionId:path}", "t"))


ROUTES = [(e.method, e.path, e.access) for e in ENDPOINTS]


async def test_every_route_without_a_token_is_401_unless_its_path_is_skipped(
        anon: httpx.AsyncClient, queue_name: str) -> None:
    for method, path, _ in ROUTES:
        url = _concrete(path, queue_name)
        r = await anon.request(method, url, json={})
        if url in DEFAULT_SKIP_PATHS:
            assert r.status_code == 200, (method, url, r.text)
        else:
            assert r.status_code == 401, (method, url, r.text)
            assert r.json() == {"error": "Authentication required"}
            assert r.headers["www-authenticate"] == "Bearer"


async def test_every_route_below_its_level_is_403_and_at_it_is_not_refused(
        anon: httpx.AsyncClient, queue_name: str) -> None:
    nobody = bearer(HS.token("nobody"))  # valid token, no role
    root = bearer(HS.token("root", role="admin"))
    for method, path, level in ROUTES:
        url = _concrete(path, queue_name)
        if url in DEFAULT_SKIP_PATHS:
            continue
        r = await anon.request(method, url, json={}, headers=nobody)
        if level is Access.PUBLIC:
            assert r.status_code < 400, (method, url, r.text)
        else:
            assert r.status_code == 403, (method, url, r.text)
            assert r.json() == {"error": "Insufficient permissions"}
        r = await anon.request(method, url, json={}, headers=root)
        assert r.status_code not in (401, 403), (method, url, r.text)


PASSES = {
    "admin": set(Access),
    "read-write": {Access.PUBLIC, Access.READ_ONLY, Access.WRITE_ONLY, Access.READ_WRITE},
    "read-only": {Access.PUBLIC, Access.READ_ONLY},
    "write-only": {Access.PUBLIC, Access.WRITE_ONLY},
}


def _samples(q: str) -> list[tuple[Access, str, str, Any, int]]:
    """(level, method, path, body, status when allowed): requests that succeed when let in."""
    lease = "0190d5b6-7f5e-7000-8000-000000000000"
    return [
        (Access.READ_ONLY, "GET", "/api/v1/resources/queues", None, 200),
        (Access.READ_ONLY, "HEAD", "/api/v1/resources/queues", None, 200),
        (Access.READ_ONLY, "GET", f"/api/v1/dlq?queue={q}", None, 200),
        (Access.READ_ONLY, "GET", "/api/v1/consumer-groups", None, 200),
        (Access.READ_ONLY, "GET", f"/api/v1/messages?queue={q}", None, 200),
        (Access.READ_ONLY, "POST", "/api/v1/fetch", {"entries": [{"queue": q}]}, 200),
        (Access.WRITE_ONLY, "POST", "/api/v1/push",
         {"items": [{"queue": q, "payload": {"n": 1}}]}, 201),
        (Access.READ_WRITE, "GET", f"/api/v1/pop/queue/{q}?wait=false&consumerGroup=x", None,
         200),
        (Access.READ_WRITE, "POST", "/api/v1/ack", {"transactionId": "t", "partitionId": "1"},
         200),
        (Access.READ_WRITE, "POST", f"/api/v1/lease/{lease}/extend", None, 200),
        (Access.READ_WRITE, "POST", "/api/v1/configure", {"queue": q}, 200),
        (Access.READ_WRITE, "POST", "/api/v1/transaction",
         {"operations": [{"type": "push", "items": [{"queue": q, "payload": 2}]}]}, 200),
        (Access.READ_WRITE, "POST", f"/api/v1/consumer-groups/g/queues/{q}/seek",
         {"toEnd": True}, 200),
        (Access.READ_WRITE, "POST", "/streams/v1/queries",
         {"name": f"{q}-s", "source_queue": q, "config_hash": "h"}, 200),
        (Access.READ_ONLY, "POST", "/streams/v1/state/get",
         {"query_id": lease, "partition_id": "1"}, 200),
        (Access.READ_WRITE, "POST", "/streams/v1/cycle",
         {"query_id": lease, "partition_id": "1"}, 200),
        (Access.READ_ONLY, "GET", "/streams/v1/queries", None, 200),
        (Access.ADMIN, "DELETE", f"/streams/v1/queries/{q}-none", None, 200),
        (Access.ADMIN, "POST", "/api/v1/stats/refresh", None, 200),
        (Access.ADMIN, "DELETE", "/api/v1/consumer-groups/nobody-uses-this", None, 200),
        (Access.ADMIN, "DELETE", f"/api/v1/resources/queues/{q}-gone", None, 200),
    ]


@pytest.mark.parametrize("role", list(PASSES))
async def test_each_role_gets_exactly_the_routes_of_its_levels(
        anon: httpx.AsyncClient, queue_name: str, role: str) -> None:
    headers = bearer(HS.token(f"user-{role}", role=role))
    await anon.post("/api/v1/configure", json={"queue": queue_name},
                    headers=bearer(HS.token("setup", role="admin")))
    await anon.post("/api/v1/push", json={"items": [{"queue": queue_name, "payload": 0}]},
                    headers=bearer(HS.token("setup", role="admin")))
    for level, method, path, body, ok in _samples(queue_name):
        r = await anon.request(method, path, json=body, headers=headers)
        if level in PASSES[role]:
            assert r.status_code == ok, (role, method, path, r.text)
        else:
            assert r.status_code == 403, (role, method, path, r.text)
            if method != "HEAD":
                assert r.json() == {"error": "Insufficient permissions"}


async def test_roles_from_the_array_claim_add_up(anon: httpx.AsyncClient,
                                                 queue_name: str) -> None:
    headers = bearer(HS.token("both", roles=["read-only", "write-only"]))
    push = await anon.post("/api/v1/push", headers=headers,
                           json={"items": [{"queue": queue_name, "payload": 1}]})
    assert push.status_code == 201
    assert (await anon.get("/api/v1/resources/queues", headers=headers)).status_code == 200
    pop = await anon.get(f"/api/v1/pop/queue/{queue_name}?wait=false", headers=headers)
    assert pop.status_code == 403  # pop is READ_WRITE although it is a GET


async def test_a_path_the_table_does_not_know_answers_404_and_runs_nothing(
        anon: httpx.AsyncClient) -> None:
    for method, path in (("GET", "/api/v1/kv-store"), ("POST", "/api/v1/system/kv-timers"),
                         ("GET", "/internal/api/anything")):
        r = await anon.request(method, path, headers=bearer(HS.token(role="admin")))
        assert r.status_code == 404 and "error" in r.json()


# --- token problems over HTTP ------------------------------------------------------------

async def test_bad_tokens_answer_401_naming_the_reason(anon: httpx.AsyncClient) -> None:
    now = int(time.time())
    cases = {
        unsigned_token({"sub": "eve", "role": "admin", "iss": ISSUER, "aud": AUDIENCE}):
            "token algorithm 'none' is not accepted",
        Signer(SECRET * 2, "HS512").token(role="admin"):
            "token algorithm 'HS512' is not accepted (expected HS256)",
        Signer("x" * 40, "HS256").token(role="admin"): "token signature is invalid",
        HS.token(role="admin", exp=now - 300): "token has expired",
        HS.token(role="admin", nbf=now + 300): "token is not yet valid",
        Signer(SECRET, "HS256", issuer="https://evil.test").token(role="admin"):
            "token issuer is not accepted",
        Signer(SECRET, "HS256", audience="other").token(role="admin"):
            "token audience is not accepted",
        "garbage": "token is malformed",
    }
    for token, reason in cases.items():
        r = await anon.get("/api/v1/resources/queues", headers=bearer(token))
        assert (r.status_code, r.json()) == (401, {"error": reason}), token


async def test_the_bearer_prefix_is_any_case_and_a_bare_token_works(
        anon: httpx.AsyncClient) -> None:
    token = HS.token(role="read-only")
    for value in (f"Bearer {token}", f"bearer {token}", f"BEARER {token}", token):
        r = await anon.get("/api/v1/resources/queues", headers={"Authorization": value})
        assert r.status_code == 200, value
    r = await anon.get("/api/v1/resources/queues", headers={"Authorization": "Basic eDp5"})
    assert r.status_code == 401 and "Bearer" in r.json()["error"]


@pytest.mark.parametrize("size", [1000, 1024 * 1024])
async def test_a_refused_request_with_a_body_does_not_wedge_its_connection(
        auth_broker: BrokerProcess, size: int) -> None:
    """401 is answered before the body is read; the body is still drained, so the next
    request pipelined on the same connection is read as a request, not as body bytes."""
    first = (f"POST /api/v1/push HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
             f"Content-Length: {size}\r\n\r\n").encode() + b"x" * size
    second = (f"GET /api/v1/resources/queues HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
              f"{HS.token(role='read-only')}\r\n\r\n").encode()
    answers = raw_exchange(auth_broker.url, first + second, answers=2, timeout=10)
    assert [status_of(a) for a in answers] == [401, 200], answers


async def test_the_openapi_document_declares_the_bearer_scheme(
        anon: httpx.AsyncClient) -> None:
    doc = (await anon.get("/openapi.json")).json()  # skipped path: no token needed
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
    push = doc["paths"]["/api/v1/push"]["post"]
    assert push["security"] == [{"bearerAuth": []}] and push["x-access-level"] == "WRITE_ONLY"
    assert {"401", "403"} <= set(push["responses"])
    health = doc["paths"]["/health"]["get"]
    assert health["security"] == [] and "401" not in health["responses"]
    assert doc["paths"]["/api/v1/pop"]["get"]["x-access-level"] == "READ_WRITE"


# --- producerSub -------------------------------------------------------------------------

async def test_pushes_are_stamped_with_the_token_sub_and_a_body_cannot_spoof_it(
        anon: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    alice = bearer(HS.token("alice", role="read-write"))
    root = bearer(HS.token("root", role="admin"))
    r = await anon.post("/api/v1/configure", headers=alice,
                        json={"queue": queue_name, "options": {"retryLimit": 0}})
    assert r.status_code == 200
    r = await anon.post("/api/v1/push", headers=alice, json={"items": [
        {"queue": queue_name, "payload": {"n": 1}, "transactionId": "a1",
         "producerSub": "mallory"}]})
    assert r.status_code == 201 and r.json()[0]["status"] == "queued", r.text
    r = await anon.post("/api/v1/transaction", headers=bearer(HS.token("carol", role="admin")),
                        json={"operations": [{"type": "push", "items": [
                            {"queue": queue_name, "payload": {"n": 2}, "transactionId": "c1",
                             "producerSub": "mallory"}]}]})
    assert r.json()["success"] is True, r.text
    # Stored in the segment frame itself.
    blobs = await db.fetch(
        """SELECT s.blob FROM queen.log_segments s JOIN queen.log_partitions p
             ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id
            WHERE q.name = $1 ORDER BY s.base_offset""", queue_name)
    frames = [f for b in blobs for f in segments.unpack(b["blob"])]
    assert [(f.transaction_id, f.producer_sub) for f in frames] == [("a1", "alice"),
                                                                    ("c1", "carol")]
    # fetch
    records = (await anon.post("/api/v1/fetch", headers=root, json={
        "entries": [{"queue": queue_name}]})).json()["entries"][0]["records"]
    assert [r["producerSub"] for r in records] == ["alice", "carol"]
    # pop
    r = await anon.get(f"/api/v1/pop/queue/{queue_name}?wait=false&batch=10&consumerGroup=g",
                       headers=root)
    popped = r.json()
    assert [m["producerSub"] for m in popped["messages"]] == ["alice", "carol"]
    partition_id = popped["messages"][0]["partitionId"]
    # message detail
    detail = (await anon.get(f"/api/v1/messages/{partition_id}/a1", headers=root)).json()
    assert detail["producerSub"] == "alice"
    # DLQ (retryLimit 0: the first failure dead-letters), and its replay keeps the producer
    r = await anon.post("/api/v1/ack", headers=root, json={
        "transactionId": "a1", "partitionId": partition_id, "status": "failed",
        "consumerGroup": "g", "leaseId": popped["leaseId"]})
    assert r.json()[0]["dlq"] is True, r.text
    dead = (await anon.get(f"/api/v1/dlq?queue={queue_name}", headers=root)).json()
    assert [m["producerSub"] for m in dead["messages"]] == ["alice"]
    replay = (await anon.post(f"/api/v1/messages/{partition_id}/a1/retry", headers=root)).json()
    new_txid = replay["replayedAs"]["transaction_id"]
    detail = (await anon.get(f"/api/v1/messages/{partition_id}/{new_txid}",
                             headers=root)).json()
    assert detail["producerSub"] == "alice"


async def test_binary_pushes_and_transactions_are_stamped_with_the_token_sub(
        anon: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    """QPB1 (plain and framed) and QTB1 bodies carry no producer; the token's sub is stamped
    on the stored frames (a client-built frame is framed again to carry it)."""
    from queen.http.push_binary import (
        PushBatch,
        encode_push_binary,
        encode_push_frames,
        encode_transaction_frames,
    )

    binary = {"Content-Type": "application/x-queen-push"}
    bodies = [
        ("/api/v1/push", "dave", encode_push_binary([PushBatch(queue_name, "", [b"1"],
                                                                ["p1"])])),
        ("/api/v1/push", "erin", encode_push_frames([PushBatch(queue_name, "Default",
                                                                [b"2", b"3"], ["f1", "f2"])])),
        ("/api/v1/transaction", "frank", encode_transaction_frames(None, [PushBatch(
            queue_name, "Default", [b"4"], ["x1"])])),
    ]
    for path, sub, body in bodies:
        r = await anon.post(path, content=body,
                            headers={**binary, **bearer(HS.token(sub, role="admin"))})
        assert r.status_code in (200, 201), r.text
    blobs = await db.fetch(
        """SELECT s.blob FROM queen.log_segments s JOIN queen.log_partitions p
             ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id
            WHERE q.name = $1 ORDER BY s.base_offset""", queue_name)
    frames = [f for b in blobs for f in segments.unpack(b["blob"])]
    want = [("p1", "dave"), ("f1", "erin"), ("f2", "erin"), ("x1", "frank")]
    assert [(f.transaction_id, f.producer_sub) for f in frames] == want
    r = await anon.get(f"/api/v1/pop/queue/{queue_name}?wait=false&batch=10",
                       headers=bearer(HS.token("root", role="admin")))
    assert [(m["transactionId"], m["producerSub"]) for m in r.json()["messages"]] == want


async def test_with_auth_off_producer_sub_is_null_and_the_body_cannot_set_it(
        http: httpx.AsyncClient, queue_name: str) -> None:
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue_name, "payload": 1, "producerSub": "mallory"}]})
    assert r.status_code == 201
    body = (await http.get(f"/api/v1/pop/queue/{queue_name}?wait=false")).json()
    assert body["messages"][0]["producerSub"] is None
    records = (await fetch_records(http, queue_name))["records"]
    assert records[0]["producerSub"] is None


# --- the official client -----------------------------------------------------------------

async def test_the_official_client_works_with_a_bearer_token(
        auth_broker: BrokerProcess, admin: httpx.AsyncClient, queue_name: str) -> None:
    out = queue_name + "-out"
    async with Queen(auth_broker.url, bearer_token=HS.token("svc-orders", role="read-write")
                     ) as client:
        await client.queue(queue_name).create()
        answer = await client.queue(queue_name).push([{"data": {"n": i}} for i in range(5)])
        assert [e["status"] for e in answer] == ["queued"] * 5
        seen: list[Any] = []
        done = asyncio.Event()

        async def handle(messages: Any) -> None:
            for m in messages if isinstance(messages, list) else [messages]:
                seen.append((m["data"]["n"], m["producerSub"]))
            if len(seen) >= 5:
                done.set()

        await asyncio.wait_for(client.queue(queue_name).group("g").batch(5).timeout_millis(
            1000).consume(handle, signal=done), 30)
        assert sorted(seen) == [(i, "svc-orders") for i in range(5)]
        await client.queue(queue_name + "-in").push([{"data": {"n": 99}}])
        [message] = await client.queue(queue_name + "-in").group("tx").wait(False).batch(
            10).pop()
        assert message["producerSub"] == "svc-orders"
        result = await (client.transaction().queue(out).push([{"data": {"step": 2}}])
                        .ack(message, "completed", {"consumer_group": "tx"}).commit())
        assert result["success"] is True
    records = (await fetch_records(admin, out))["records"]
    assert [(r["payload"], r["producerSub"]) for r in records] == [({"step": 2},
                                                                     "svc-orders")]
    # every ack landed: nothing left for group g
    r = await admin.get(f"/api/v1/pop/queue/{queue_name}?wait=false&consumerGroup=g")
    assert r.status_code == 204


async def test_the_official_client_below_its_level_fails_loudly(
        auth_broker: BrokerProcess, queue_name: str) -> None:
    async with Queen(auth_broker.url, bearer_token=HS.token("reader", role="read-only")
                     ) as client:
        with pytest.raises(Exception, match="Insufficient permissions"):
            await client.queue(queue_name).push([{"data": 1}])
    async with Queen(auth_broker.url) as no_token:
        with pytest.raises(Exception, match="Authentication required"):
            await no_token.queue(queue_name).push([{"data": 1}])


# --- RS256 with a PEM key, PUBLIC routes behind a token --------------------------------------

RSA = rsa_key()


@pytest.fixture(scope="module")
def pem_broker(database_url: str) -> Iterator[BrokerProcess]:
    env = {"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256",
           "JWT_PUBLIC_KEY": public_pem(RSA).replace("\n", "\\n"), "JWT_SKIP_PATHS": "/health"}
    with BrokerProcess(database_url, workers=1, env=env) as proc:
        yield proc


async def test_rs256_tokens_against_a_pem_key_and_public_routes_behind_a_token(
        pem_broker: BrokerProcess) -> None:
    rs = Signer(RSA, "RS256", issuer=None, audience=None)
    async with httpx.AsyncClient(base_url=pem_broker.url, timeout=30) as c:
        assert (await c.get("/health")).status_code == 200  # skipped
        assert (await c.get("/metrics")).status_code == 401  # PUBLIC, but not skipped
        no_role = bearer(rs.token("someone"))
        assert (await c.get("/metrics", headers=no_role)).status_code == 200
        assert (await c.get("/openapi.json", headers=no_role)).status_code == 200
        assert (await c.get("/api/v1/resources/queues", headers=no_role)).status_code == 403
        r = await c.get("/api/v1/resources/queues",
                        headers=bearer(rs.token(role="read-only")))
        assert r.status_code == 200
        forged = Signer(rsa_key(), "RS256").token(role="admin")
        r = await c.get("/api/v1/resources/queues", headers=bearer(forged))
        assert r.json() == {"error": "token signature is invalid"}
        r = await c.get("/api/v1/resources/queues", headers=bearer(HS.token(role="admin")))
        assert r.json() == {"error": "token algorithm 'HS256' is not accepted (expected RS256)"}


# --- JWKS on 127.0.0.1: EdDSA and RS256, rotation, outage -------------------------------------

async def test_jwks_keys_rotation_and_outage_through_a_running_broker(
        database_url: str, queue_name: str) -> None:
    ed, rs = ed_key(), rsa_key()
    with JwksServer({"keys": [public_jwk(ed, "ed-1"), public_jwk(rs, "rs-1", "RS256")]}
                    ) as jwks:
        env = {"JWT_ENABLED": "true", "JWT_ALGORITHM": "auto", "JWT_JWKS_URL": jwks.url,
               "JWT_JWKS_TIMEOUT_MS": "1000"}
        with BrokerProcess(database_url, workers=1, env=env) as broker:
            async with httpx.AsyncClient(base_url=broker.url, timeout=30) as c:
                async def status(signer: Signer, **claims: Any) -> int:
                    r = await c.post("/api/v1/push", headers=bearer(signer.token(
                        "jwks-user", role="write-only", **claims)), json={"items": [
                        {"queue": queue_name, "payload": 1}]})
                    return r.status_code

                assert await status(Signer(ed, "EdDSA", kid="ed-1")) == 201
                assert await status(Signer(rs, "RS256", kid="rs-1")) == 201
                fetched = jwks.requests
                # Rotation: a new key is published; its first token makes the broker fetch.
                ed2 = ed_key()
                jwks.document = {"keys": [public_jwk(ed2, "ed-2"), public_jwk(ed, "ed-1")]}
                assert await status(Signer(ed2, "EdDSA", kid="ed-2")) == 201
                assert jwks.requests == fetched + 1
                # Made-up kids: 401 after one shared fetch, not a fetch per request.
                bogus = await asyncio.gather(*(status(Signer(ed_key(), "EdDSA", kid="bogus"))
                                               for _ in range(5)))
                assert bogus == [401] * 5
                assert jwks.requests == fetched + 2
                # The JWKS goes down: known keys keep working; an unknown kid is 503.
                jwks.stop()
                assert await status(Signer(ed2, "EdDSA", kid="ed-2")) == 201
                r = await c.post("/api/v1/push", headers=bearer(Signer(
                    ed_key(), "EdDSA", kid="ed-3").token(role="admin")), json={"items": []})
                assert r.status_code == 503 and "Retry-After" in r.headers
                assert "JWT_JWKS_URL" in r.json()["error"]
            async with httpx.AsyncClient(base_url=broker.url, headers=bearer(Signer(
                    ed, "EdDSA", kid="ed-1").token(role="read-only"))) as reader:
                records = (await fetch_records(reader, queue_name))["records"]
            assert len(records) == 4 and {r["producerSub"] for r in records} == {"jwks-user"}


# --- start-up refusals --------------------------------------------------------------------

@pytest.mark.parametrize(("env", "named"), [
    ({"JWT_ENABLED": "true"}, "JWT_SECRET"),
    ({"JWT_ENABLED": "true", "JWT_SECRET": "short-secret"}, "JWT_SECRET is too short"),
    ({"JWT_ENABLED": "true", "JWT_ALGORITHM": "EdDSA"}, "JWT_PUBLIC_KEY or JWT_JWKS_URL"),
    ({"JWT_ENABLED": "yes", "JWT_SECRET": SECRET}, "JWT_ENABLED"),
])
def test_serve_refuses_to_start_naming_the_variable_and_does_not_loop(
        database_url: str, env: dict[str, str], named: str) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [PYTHON, "-m", "broker.cli", "serve"], cwd=ROOT, capture_output=True, text=True,
        check=False,
        timeout=60, env={"PATH": "/usr/bin:/bin", "DATABASE_URL": database_url,
                         "HOST": "127.0.0.1", "PORT": str(free_port()), **env})
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and done.stderr.startswith("queen-broker: ")
    assert "short-secret" not in done.stderr
    assert time.monotonic() - started < 30
