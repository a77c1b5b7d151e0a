"""HTTPS on the web workers (TLS_CERT_FILE/TLS_KEY_FILE): the clients users run (httpx, the
official client, curl, the CLI) with a CA file, HTTP/2 when offered over ALPN, and client
certificates (mutual TLS) whose subject becomes the producer identity."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from queen import Queen

from tests.certs import TestPki, serial_of
from tests.support import PYTHON, ROOT, BrokerProcess
from tests.tokens import AUTH_ENV, AUTH_SECRET, Signer, bearer

SIGNER = Signer(AUTH_SECRET, "HS256")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    return TestPki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def https_broker(database_url: str, pki: TestPki, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[BrokerProcess]:
    log = tmp_path_factory.mktemp("https") / "web.log"
    with BrokerProcess(database_url, env=pki.env(), tls=pki.client_context(),
                       log_path=log) as proc:
        yield proc
    assert "Traceback" not in log.read_text(errors="replace")


@pytest.fixture(scope="module")
def mtls_broker(database_url: str, pki: TestPki, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[BrokerProcess]:
    """Client certificates required."""
    client = pki.client_files("health-probe")
    with BrokerProcess(database_url, env=pki.env(client_ca=True),
                       tls=pki.client_context(client)) as proc:
        yield proc


@pytest.fixture(scope="module")
def mtls_auth_broker(database_url: str, pki: TestPki) -> Iterator[BrokerProcess]:
    """Auth on, client certificates optional."""
    with BrokerProcess(database_url, env={**AUTH_ENV, **pki.env(
            client_ca=True, TLS_CLIENT_AUTH="optional")}, tls=pki.client_context()) as proc:
        yield proc


async def _push_then_pop(client: httpx.AsyncClient, queue: str, payload: object,
                         headers: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    r = await client.post("/api/v1/push", headers=headers, json={"items": [
        {"queue": queue, "payload": payload}]})
    assert r.status_code == 201, r.text
    r = await client.get(f"/api/v1/pop/queue/{queue}", params={"wait": "false"},
                         headers=headers)
    assert r.status_code == 200, r.text
    [message] = r.json()["messages"]
    return message  # type: ignore[no-any-return]


async def test_https_with_the_ca_file_pushes_and_pops_and_shows_the_configured_certificate(
        https_broker: BrokerProcess, pki: TestPki) -> None:
    queue = f"tls-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=https_broker.url, verify=pki.client_context()
                                 ) as client:
        message = await _push_then_pop(client, queue, {"n": 1})
        assert message["data"] == {"n": 1}
        assert message["producerSub"] is None  # no token, no client certificate
    context = pki.client_context()
    with context.wrap_socket(socket.create_connection(
            ("127.0.0.1", https_broker.port)), server_hostname="127.0.0.1") as tls:
        assert serial_of(tls.getpeercert(binary_form=True) or b"") == pki.serial


async def test_without_the_ca_or_without_tls_the_client_cannot_talk_to_it(
        https_broker: BrokerProcess) -> None:
    async with httpx.AsyncClient(verify=True) as client:  # the public CAs only
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get(https_broker.url + "/health")
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.HTTPError):
            await client.get(f"http://127.0.0.1:{https_broker.port}/health")


async def test_http2_is_negotiated_over_alpn_and_serves_the_api(
        https_broker: BrokerProcess, pki: TestPki) -> None:
    queue = f"h2-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=https_broker.url, verify=pki.client_context(),
                                 http2=True) as client:
        r = await client.get("/health")
        assert r.http_version == "HTTP/2"
        message = await _push_then_pop(client, queue, "over h2")
        assert message["data"] == "over h2"
    async with httpx.AsyncClient(base_url=https_broker.url, verify=pki.client_context()
                                 ) as client:
        assert (await client.get("/health")).http_version == "HTTP/1.1"


def test_curl_with_a_ca_file_speaks_http1_and_http2(https_broker: BrokerProcess,
                                                    pki: TestPki) -> None:
    for flag, version in (("--http1.1", "1.1"), ("--http2", "2")):
        done = subprocess.run(
            ["curl", "-sS", "--fail-with-body", flag, "--cacert", str(pki.ca_file),
             "-o", "/dev/null", "-w", "%{http_version}", https_broker.url + "/health"],
            capture_output=True, text=True, timeout=30, check=False)
        assert (done.returncode, done.stdout) == (0, version), done.stderr


async def test_the_official_client_over_https_with_a_ca_file(
        https_broker: BrokerProcess, pki: TestPki) -> None:
    queue = f"official-{uuid.uuid4().hex[:8]}"
    transport = httpx.AsyncHTTPTransport(verify=pki.client_context())
    async with Queen(url=https_broker.url, transport=transport) as client:
        await client.queue(queue).create()
        await client.queue(queue).push([{"data": {"over": "tls"}}])
        [message] = await client.queue(queue).wait(False).pop()
        assert message["data"] == {"over": "tls"}


def test_the_official_client_trusts_the_ca_named_by_ssl_cert_file(
        https_broker: BrokerProcess, pki: TestPki, tmp_path: Path) -> None:
    """No code change: httpx, under the official client, reads SSL_CERT_FILE."""
    script = tmp_path / "client.py"
    script.write_text(
        "import asyncio, sys\nfrom queen import Queen\n"
        "async def main():\n"
        "    async with Queen(url=sys.argv[1]) as q:\n"
        "        await q.queue('env-ca').create()\n"
        "asyncio.run(main())\n")
    env = {**os.environ, "SSL_CERT_FILE": str(pki.ca_file)}
    done = subprocess.run([PYTHON, str(script), https_broker.url], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_")}
    return subprocess.run([PYTHON, "-m", "broker.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_cli_takes_cacert_and_without_it_cannot_verify_the_broker(
        https_broker: BrokerProcess, pki: TestPki) -> None:
    done = _cli("status", "--json", "--url", https_broker.url, "--cacert", str(pki.ca_file))
    assert done.returncode == 0, done.stderr
    assert '"status": "healthy"' in done.stdout
    refused = _cli("status", "--url", https_broker.url)
    assert refused.returncode == 3, refused.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in refused.stderr


async def test_a_client_certificate_is_required_and_its_subject_is_the_producer(
        mtls_broker: BrokerProcess, pki: TestPki) -> None:
    queue = f"mtls-{uuid.uuid4().hex[:8]}"
    billing = pki.client_context(pki.client_files("billing-service"))
    async with httpx.AsyncClient(base_url=mtls_broker.url, verify=billing) as client:
        message = await _push_then_pop(client, queue, {"n": 1})
    assert message["producerSub"] == "billing-service"
    # A producerSub in the body is never read (§9): the certificate's subject is stamped.
    async with httpx.AsyncClient(base_url=mtls_broker.url, verify=billing) as client:
        r = await client.post("/api/v1/push", json={"items": [
            {"queue": queue + "-2", "payload": 2, "producerSub": "someone-else"}]})
        assert r.status_code == 201, r.text
        r = await client.get(f"/api/v1/pop/queue/{queue}-2", params={"wait": "false"})
        assert r.json()["messages"][0]["producerSub"] == "billing-service"
    async with httpx.AsyncClient(base_url=mtls_broker.url, verify=pki.client_context()
                                 ) as client:
        with pytest.raises(httpx.HTTPError):  # no certificate: the handshake is refused
            await client.get("/health")


def test_the_cli_shows_a_client_certificate_with_cert_and_key(
        mtls_broker: BrokerProcess, pki: TestPki) -> None:
    cert, key = pki.client_files("operator")
    done = _cli("status", "--json", "--url", mtls_broker.url, "--cacert", str(pki.ca_file),
                "--cert", str(cert), "--key", str(key))
    assert done.returncode == 0, done.stderr
    assert _cli("status", "--url", mtls_broker.url, "--cacert",
                str(pki.ca_file)).returncode == 3


async def test_with_auth_on_the_tokens_subject_wins_and_the_certificate_fills_in_for_none(
        mtls_auth_broker: BrokerProcess, pki: TestPki) -> None:
    queue = f"mtls-auth-{uuid.uuid4().hex[:8]}"
    shown = pki.client_context(pki.client_files("cert-subject"))
    async with httpx.AsyncClient(base_url=mtls_auth_broker.url, verify=shown) as client:
        # A certificate is no token: with auth on, the request still needs one.
        assert (await client.get("/api/v1/resources/queues")).status_code == 401
        with_sub = bearer(SIGNER.token("token-subject", role="read-write"))
        assert (await _push_then_pop(client, queue, 1, with_sub))["producerSub"] == \
            "token-subject"
        without_sub = bearer(SIGNER.token(None, role="read-write"))
        assert (await _push_then_pop(client, queue + "-2", 2, without_sub))["producerSub"] == \
            "cert-subject"
    async with httpx.AsyncClient(base_url=mtls_auth_broker.url, verify=pki.client_context()
                                 ) as client:  # optional: no certificate is fine too
        without_sub = bearer(SIGNER.token(None, role="read-write"))
        assert (await _push_then_pop(client, queue + "-3", 3, without_sub))["producerSub"] \
            is None

