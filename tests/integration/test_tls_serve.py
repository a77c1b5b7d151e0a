"""TLS under `queen-broker serve`: certificates rotated under traffic on both listeners
(SIGHUP, or the files changing) with no failed request, and a bad TLS configuration
refused at start in one line."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from tests.certs import TestPki, serial_of
from tests.served import Served
from tests.support import PYTHON, ROOT, free_port

pytestmark = pytest.mark.timeout(240)


def _peer_serial(port: int, pki: TestPki) -> int:
    """The serial of the certificate a new connection to `port` gets."""
    with pki.client_context().wrap_socket(socket.create_connection(("127.0.0.1", port), 5),
                                          server_hostname="127.0.0.1") as tls:
        return serial_of(tls.getpeercert(binary_form=True) or b"")


async def _until_serial(port: int, pki: TestPki, serial: int, timeout: float = 30) -> None:
    """Until new connections to `port` get the certificate `serial` (the Kafka listener
    starts listening a moment after the web workers: refused connections are retried)."""
    deadline = time.monotonic() + timeout
    seen: int | None = None
    while True:
        try:
            seen = await asyncio.to_thread(_peer_serial, port, pki)
        except ConnectionRefusedError:
            seen = None
        if seen == serial:
            return
        assert time.monotonic() < deadline, f"port {port} serves serial {seen}, not {serial}"
        await asyncio.sleep(0.1)


@dataclass
class Traffic:
    """Pushes over new HTTPS connections and Kafka produces over one TLS connection, until
    stopped; every failure kept."""

    url: str
    kafka: str
    pki: TestPki
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    pushes: int = 0
    produced: int = 0
    failures: list[str] = field(default_factory=list)

    async def pushing(self) -> None:
        queue = f"rot-{uuid.uuid4().hex[:8]}"
        # No keep-alive: every request makes a new connection, so a new TLS handshake.
        async with httpx.AsyncClient(base_url=self.url, verify=self.pki.client_context(),
                                     limits=httpx.Limits(max_keepalive_connections=0),
                                     timeout=30) as client:
            while not self.stop.is_set():
                try:
                    r = await client.post("/api/v1/push", json={"items": [
                        {"queue": queue, "payload": self.pushes}]})
                    if r.status_code != 201:
                        self.failures.append(f"push answered {r.status_code}: {r.text}")
                    self.pushes += 1
                except httpx.HTTPError as exc:
                    self.failures.append(f"push failed: {exc!r}")

    async def until(self, tasks: list[asyncio.Task[None]], pushes: int, produced: int,
                    timeout: float = 60) -> None:
        """Until this many pushes and produces are done; fails at once when a traffic task
        ended (it cannot make progress any more) and after `timeout`."""
        deadline = time.monotonic() + timeout
        while self.pushes < pushes or self.produced < produced:
            for task in tasks:
                if task.done():
                    task.result()
                    raise AssertionError(f"traffic stopped: {self.failures}")
            assert time.monotonic() < deadline, (
                f"{self.pushes} pushes, {self.produced} produced in {timeout} s: "
                f"{self.failures}")
            await asyncio.sleep(0.1)

    async def producing(self) -> None:
        topic = f"rot-{uuid.uuid4().hex[:8]}"
        producer = AIOKafkaProducer(bootstrap_servers=self.kafka, security_protocol="SSL",
                                    ssl_context=self.pki.client_context())
        await producer.start()
        try:
            while not self.stop.is_set():
                try:
                    await producer.send_and_wait(topic, b"x", partition=0)
                    self.produced += 1
                except Exception as exc:  # noqa: BLE001 - every failure is the finding
                    self.failures.append(f"produce failed: {exc!r}")
        finally:
            await producer.stop()


async def _rotate_under_traffic(served: Served, pki: TestPki, kafka_port: int,
                                rotate: Callable[[], None] | None) -> Traffic:
    traffic = Traffic(served.url, f"127.0.0.1:{kafka_port}", pki)
    first = pki.serial
    await _until_serial(served.port, pki, first)
    await _until_serial(kafka_port, pki, first)
    workers, kafka = served.children("web"), served.children("kafka")
    tasks = [asyncio.create_task(traffic.pushing()) for _ in range(3)]
    tasks.append(asyncio.create_task(traffic.producing()))
    try:
        await traffic.until(tasks, 20, 20)
        second = pki.issue_server()
        if rotate is not None:
            rotate()
        await _until_serial(served.port, pki, second)
        await _until_serial(kafka_port, pki, second)
        # Traffic goes on after the rotation, on the new certificate.
        await traffic.until(tasks, traffic.pushes + 20, traffic.produced + 20)
    finally:
        traffic.stop.set()
        await asyncio.gather(*tasks)
    assert traffic.failures == []
    # Nothing was restarted: the same workers and Kafka listener served throughout.
    assert (served.children("web"), served.children("kafka")) == (workers, kafka)
    return traffic


@pytest.fixture
def pki(tmp_path: Path) -> TestPki:
    return TestPki(tmp_path / "pki")


def _served(tmp_path: Path, database: str, pki: TestPki, kafka_port: int,
            watch_ms: int) -> Served:
    return Served(tmp_path / "serve.log", tls=pki.client_context(), env={
        "DATABASE_URL": database, "QUEEN_KAFKA_PORT": str(kafka_port),
        **pki.env(TLS_WATCH_INTERVAL_MS=str(watch_ms))})


async def test_sighup_rotates_the_certificate_of_both_listeners_under_traffic(
        own_database: str, pki: TestPki, tmp_path: Path) -> None:
    kafka_port = free_port()
    first = pki.serial
    with _served(tmp_path, own_database, pki, kafka_port, watch_ms=0) as served:
        await _rotate_under_traffic(served, pki, kafka_port,
                                    lambda: os.kill(served.pid, signal.SIGHUP))
        log = served.log()
    assert re.search(f"TLS certificate: CN=queen-test-server,.*, serial {first:x}, valid until",
                     log)
    assert "SIGHUP: the listeners reload their TLS certificates" in log
    assert "TLS certificate reloaded (SIGHUP)" in log
    assert "Traceback" not in log


async def test_a_change_of_the_files_rotates_the_certificate_under_traffic(
        own_database: str, pki: TestPki, tmp_path: Path) -> None:
    kafka_port = free_port()
    with _served(tmp_path, own_database, pki, kafka_port, watch_ms=200) as served:
        await _rotate_under_traffic(served, pki, kafka_port, None)
        log = served.log()
    assert "TLS certificate reloaded (the files changed)" in log
    assert "Traceback" not in log


def _serve_fails(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "broker.cli", "serve"], cwd=ROOT,
                          env={**os.environ, "PORT": str(free_port()), **env},
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_bad_tls_configuration_stops_serve_at_start_in_one_line(
        pki: TestPki, tmp_path: Path) -> None:
    other = TestPki(tmp_path / "other")
    cases = {
        "missing": ({"TLS_CERT_FILE": str(tmp_path / "missing.pem")},
                    f"TLS_CERT_FILE={tmp_path / 'missing.pem'}: No such file or directory"),
        "mismatch": ({"TLS_KEY_FILE": str(other.key_file)},
                     f"TLS_KEY_FILE={other.key_file} is not the private key"),
    }
    for env, message in cases.values():
        done = _serve_fails(pki.env(**env))
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().startswith("queen-broker: " + message), done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
