"""Tokens, the database password and payloads never reach the logs (reliability §Security).

A whole `serve` (supervisor, web workers, reaper) at log level debug, with a password in
DATABASE_URL and auth on, is driven through pushes, pops, acks, a transaction, a dead letter,
refused tokens and failing requests; then its captured output is searched for every secret.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from tests.served import Served
from tests.tokens import Signer

SECRET = "log-hygiene-secret-" + uuid.uuid4().hex


def with_password(url: str, password: str) -> tuple[str, str]:
    """`url` carrying a password (the test server trusts local connections and ignores it);
    a URL that already has one keeps it."""
    parts = urlsplit(url)
    if parts.password:
        return url, parts.password
    user, _, host = parts.netloc.rpartition("@")
    netloc = f"{user or 'postgres'}:{password}@{host}"
    return urlunsplit(parts._replace(netloc=netloc)), password


async def test_a_debug_log_holds_no_token_no_password_and_no_payload(
        database_url: str, tmp_path: Path) -> None:
    url, password = with_password(database_url, "pw-" + uuid.uuid4().hex)
    signer = Signer(SECRET, "HS256", issuer=None, audience=None)
    token = signer.token("log-user", role="admin")
    refused = Signer("another-secret-" + uuid.uuid4().hex, "HS256").token(role="admin")
    marker = "payload-marker-" + uuid.uuid4().hex
    queue = "logs-" + uuid.uuid4().hex[:8]
    env = {"DATABASE_URL": url, "LOG_LEVEL": "debug", "JWT_ENABLED": "true",
           "JWT_SECRET": SECRET, "REAPER_INTERVAL_MS": "100"}
    with Served(tmp_path / "serve.log", env=env) as served:
        auth = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=served.url, timeout=30, headers=auth) as c:
            r = await c.post("/api/v1/configure", json={"queue": queue,
                                                        "options": {"retryLimit": 0}})
            assert r.status_code == 200
            for i in range(3):
                r = await c.post("/api/v1/push", json={"items": [
                    {"queue": queue, "payload": {"secret": marker, "i": i}}]})
                assert r.status_code == 201
            r = await c.post("/api/v1/transaction", json={"operations": [
                {"type": "push", "items": [{"queue": queue, "payload": marker}]}]})
            assert r.json()["success"] is True
            popped = (await c.get(f"/api/v1/pop/queue/{queue}?wait=false&batch=10")).json()
            assert marker in str(popped)
            first = popped["messages"][0]
            r = await c.post("/api/v1/ack", json={
                "transactionId": first["transactionId"], "partitionId": first["partitionId"],
                "status": "failed", "error": marker, "leaseId": popped["leaseId"]})
            assert r.json()[0]["dlq"] is True
            assert marker in (await c.get(f"/api/v1/dlq?queue={queue}")).text
            # refusals and failures: a bad token, no token, a body that is not JSON, a
            # payload that is not UTF-8, an unknown route
            bad = {"Authorization": f"Bearer {refused}"}
            assert (await c.get("/api/v1/resources/queues", headers=bad)).status_code == 401
            r = await c.post("/api/v1/push", content=f'{{"items": [{marker}'.encode(),
                             headers={"content-type": "application/json"})
            assert r.status_code == 400
            r = await c.post("/api/v1/push", content=b'{"items":[{"queue":"q","payload":"'
                             + marker.encode() + b'\xff"}]}')
            assert r.status_code == 400
            assert (await c.get(f"/api/v1/{marker}")).status_code == 404
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as anon:
            assert (await anon.get("/api/v1/resources/queues")).status_code == 401
        served.stop()
        log = served.log()
    assert "serving on" in log and "DEBUG" in log  # the log did capture debug output
    for secret, what in ((token, "the token"), (refused, "the refused token"),
                         (token.split(".")[2], "the token's signature"),
                         (SECRET, "the JWT secret"), (password, "the database password"),
                         (marker, "a payload")):
        assert secret not in log, f"{what} is in the log"


def test_serving_beyond_loopback_without_auth_is_warned_about_at_start_up(
        database_url: str, tmp_path: Path) -> None:
    """The one test that listens on every interface (as the broker does by default), for the
    few seconds it takes to read the start-up log; it talks only to 127.0.0.1."""
    with Served(tmp_path / "open.log", command="web", workers=1,
                env={"DATABASE_URL": database_url, "HOST": "0.0.0.0"}) as served:
        log = served.log()
    assert "authentication is off (JWT_ENABLED is not 'true') and the broker listens on " \
           "0.0.0.0" in log
    with Served(tmp_path / "loopback.log", command="web", workers=1,
                env={"DATABASE_URL": database_url, "JWT_SECRET": SECRET}) as served:
        log = served.log()
    assert "beyond this machine" not in log
    assert "JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL is set but JWT_ENABLED is not " \
           "'true'" in log
