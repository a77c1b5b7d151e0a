"""CORS: preflights answered before routing and auth, answers labelled for allowed origins."""

from __future__ import annotations

import asyncpg
import httpx

from tests.integration.test_wire_edge import raw_exchange, status_of
from tests.support import BrokerProcess, queue_counts
from tests.tokens import APP_ORIGIN, AUTH_SECRET, Signer, bearer

NOTHING = {"queues": 0, "partitions": 0, "segments": 0, "txn_index": 0}
PREFLIGHT = {"Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization,content-type"}


async def test_a_preflight_is_204_with_the_cors_headers_and_changes_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    r = await http.request("OPTIONS", "/api/v1/push",
                           headers={"Origin": "https://any.test", **PREFLIGHT},
                           json={"items": [{"queue": queue_name, "payload": 1}]})
    assert r.status_code == 204 and r.content == b""
    assert r.headers["access-control-allow-origin"] == "*"
    assert r.headers["access-control-allow-methods"] == "GET, HEAD, POST, DELETE, OPTIONS"
    assert r.headers["access-control-allow-headers"] == "Authorization, Content-Type"
    assert r.headers["access-control-max-age"] == "3600"
    assert await queue_counts(db, queue_name) == NOTHING


async def test_a_preflight_with_a_body_does_not_wedge_its_connection(
        broker: BrokerProcess) -> None:
    first = (b"OPTIONS /api/v1/push HTTP/1.1\r\nHost: t\r\nOrigin: https://any.test\r\n"
             b"Content-Length: 1048576\r\n\r\n" + b"x" * 1048576)
    second = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
    answers = raw_exchange(broker.url, first + second, answers=2, timeout=10)
    assert [status_of(a) for a in answers] == [204, 200], answers


async def test_answers_to_a_browser_carry_allow_origin_and_others_none(
        http: httpx.AsyncClient) -> None:
    r = await http.get("/health", headers={"Origin": "https://any.test"})
    assert r.headers["access-control-allow-origin"] == "*"
    assert r.headers["access-control-expose-headers"] == "Retry-After"
    assert "access-control-allow-origin" not in (await http.get("/health")).headers


async def test_with_listed_origins_only_those_are_allowed_even_before_auth(
        auth_broker: BrokerProcess) -> None:
    async with httpx.AsyncClient(base_url=auth_broker.url, timeout=30) as c:
        # A browser's preflight carries no token; it is answered all the same.
        r = await c.options("/api/v1/push", headers={"Origin": APP_ORIGIN, **PREFLIGHT})
        assert r.status_code == 204
        assert r.headers["access-control-allow-origin"] == APP_ORIGIN
        assert r.headers["vary"] == "Origin"
        r = await c.options("/api/v1/push", headers={"Origin": "https://evil.test",
                                                     **PREFLIGHT})
        assert r.status_code == 403 and "evil.test" in r.json()["error"]
        assert "access-control-allow-origin" not in r.headers
        # A refusal is readable by the page (so it can tell 401 from a network error)...
        r = await c.get("/api/v1/resources/queues", headers={"Origin": APP_ORIGIN})
        assert r.status_code == 401
        assert r.headers["access-control-allow-origin"] == APP_ORIGIN
        # ...and a success too; another origin's page gets no CORS headers to read it by.
        token = bearer(Signer(AUTH_SECRET, "HS256").token(role="read-only"))
        r = await c.get("/api/v1/resources/queues", headers={"Origin": APP_ORIGIN, **token})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == APP_ORIGIN
        r = await c.get("/api/v1/resources/queues",
                        headers={"Origin": "https://evil.test", **token})
        assert "access-control-allow-origin" not in r.headers
