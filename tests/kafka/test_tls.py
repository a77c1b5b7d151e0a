"""TLS on the Kafka listener: the `SSL` security protocol (TLS_CERT_FILE set, auth off) and
`SASL_SSL` (auth on too) with kcat, confluent-kafka, kafka-python and aiokafka, each
verifying the listener's certificate against the test CA; client certificates (mutual TLS)
whose subject becomes the producer identity."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as PythonPartition

from tests.certs import TestPki
from tests.kafka.listener import KafkaListener
from tests.support import BrokerProcess
from tests.tokens import AUTH_ENV, AUTH_SECRET, Signer

SIGNER = Signer(AUTH_SECRET, "HS256")
PROTOCOLS = ("SSL", "SASL_SSL")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    return TestPki(tmp_path_factory.mktemp("kafka-pki"))


def _listener(database_url: str, env: dict[str, str], log: Path) -> Iterator[KafkaListener]:
    with KafkaListener(database_url, env={**env, "LOG_LEVEL": "info"}, log_path=log) as kafka:
        yield kafka
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text


@pytest.fixture(scope="module")
def listeners(database_url: str, pki: TestPki, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[dict[str, KafkaListener]]:
    """One listener per protocol: SSL (auth off) and SASL_SSL (auth on)."""
    logs = tmp_path_factory.mktemp("kafka-tls")
    ssl_only = _listener(database_url, pki.env(), logs / "ssl.log")
    sasl_ssl = _listener(database_url, {**AUTH_ENV, **pki.env()}, logs / "sasl.log")
    try:
        yield {"SSL": next(ssl_only), "SASL_SSL": next(sasl_ssl)}
    finally:
        for listener in (ssl_only, sasl_ssl):
            next(listener, None)


@pytest.fixture(scope="module")
def mtls_kafka(database_url: str, pki: TestPki, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[KafkaListener]:
    """Client certificates required, auth off."""
    yield from _listener(database_url, pki.env(client_ca=True),
                         tmp_path_factory.mktemp("kafka-mtls") / "kafka.log")


def _token() -> str:
    return SIGNER.token("tls-writer", role="read-write")


def _topic() -> str:
    return f"tls-{uuid.uuid4().hex[:10]}"


def _log_says(listener: KafkaListener, protocol: str) -> None:
    assert listener.log_path is not None
    assert f", {protocol} (node" in listener.log_path.read_text()


# --- each client: produce three values, read them back --------------------------------------

def _kcat(kafka: KafkaListener, protocol: str, pki: TestPki, topic: str) -> list[bytes]:
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is not installed (Debian package kcat; .ci/run installs it)"
    config = ["-X", f"security.protocol={protocol.lower()}",
              "-X", f"ssl.ca.location={pki.ca_file}"]
    if protocol == "SASL_SSL":
        config += ["-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=ignored",
                   "-X", f"sasl.password={_token()}"]

    def run(*args: str, stdin: bytes | None = None) -> str:
        done = subprocess.run([kcat, "-b", kafka.bootstrap, *config, "-t", topic, *args],
                              input=stdin, capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        return done.stdout.decode()

    run("-P", "-p", "0", stdin=b"v0\nv1\nv2\n")
    out = run("-C", "-p", "0", "-o", "beginning", "-e", "-f", "%s\\n")
    return [line.encode() for line in out.splitlines()]


def _confluent_config(kafka: KafkaListener, protocol: str, pki: TestPki) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": kafka.bootstrap,
                              "security.protocol": protocol,
                              "ssl.ca.location": str(pki.ca_file)}
    if protocol == "SASL_SSL":
        config.update({"sasl.mechanisms": "PLAIN", "sasl.username": "ignored",
                       "sasl.password": _token()})
    return config


def _confluent(kafka: KafkaListener, protocol: str, pki: TestPki, topic: str,
               **extra: Any) -> list[bytes]:
    config = {**_confluent_config(kafka, protocol, pki), **extra}
    producer = Producer({**config, "linger.ms": 5})
    failures: list[object] = []
    for i in range(3):
        producer.produce(topic, value=f"v{i}".encode(), partition=0,
                         on_delivery=lambda err, msg: err and failures.append(err))
    assert producer.flush(30) == 0
    assert failures == []
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([ConfluentPartition(topic, 0, 0)])
        got: list[bytes] = []
        for _ in range(100):
            if len(got) == 3:
                break
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            got.append(message.value())
        return got
    finally:
        consumer.close()


def _kafka_python(kafka: KafkaListener, protocol: str, pki: TestPki, topic: str) -> list[bytes]:
    config: dict[str, Any] = {"bootstrap_servers": kafka.bootstrap,
                              "security_protocol": protocol, "ssl_cafile": str(pki.ca_file)}
    if protocol == "SASL_SSL":
        config.update(sasl_mechanism="PLAIN", sasl_plain_username="ignored",
                      sasl_plain_password=_token())
    producer = KafkaProducer(**config)
    try:
        for i in range(3):
            producer.send(topic, f"v{i}".encode(), partition=0).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(**config, enable_auto_commit=False, consumer_timeout_ms=10_000)
    try:
        consumer.assign([PythonPartition(topic, 0)])
        consumer.seek_to_beginning()
        got = []
        for message in consumer:
            got.append(message.value)
            if len(got) == 3:
                break
        return got
    finally:
        consumer.close()


async def _aiokafka(kafka: KafkaListener, protocol: str, pki: TestPki, topic: str,
                    client: tuple[Path, Path] | None = None) -> list[bytes]:
    config: dict[str, Any] = {"bootstrap_servers": kafka.bootstrap,
                              "security_protocol": protocol,
                              "ssl_context": pki.client_context(client)}
    if protocol == "SASL_SSL":
        config.update(sasl_mechanism="PLAIN", sasl_plain_username="ignored",
                      sasl_plain_password=_token())
    producer = AIOKafkaProducer(**config)
    await producer.start()
    try:
        for i in range(3):
            await producer.send_and_wait(topic, f"v{i}".encode(), partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(**config, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        return [(await consumer.getone()).value for _ in range(3)]
    finally:
        await consumer.stop()


SYNC_CLIENTS: dict[str, Callable[..., list[bytes]]] = {
    "kcat": _kcat, "confluent-kafka": _confluent, "kafka-python": _kafka_python}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("client", list(SYNC_CLIENTS))
async def test_each_client_produces_and_consumes_over_tls(
        listeners: dict[str, KafkaListener], pki: TestPki, client: str, protocol: str) -> None:
    topic = _topic()
    got = await asyncio.to_thread(SYNC_CLIENTS[client], listeners[protocol], protocol, pki,
                                  topic)
    assert got == [b"v0", b"v1", b"v2"]
    _log_says(listeners[protocol], protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_aiokafka_produces_and_consumes_over_tls(
        listeners: dict[str, KafkaListener], pki: TestPki, protocol: str) -> None:
    assert await _aiokafka(listeners[protocol], protocol, pki, _topic()) == [b"v0", b"v1", b"v2"]


async def test_a_plaintext_client_cannot_talk_to_a_tls_listener(
        listeners: dict[str, KafkaListener]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=listeners["SSL"].bootstrap,
                                request_timeout_ms=3000)
    with pytest.raises(KafkaConnectionError):
        await producer.start()
    await producer.stop()
    assert listeners["SSL"].alive()


async def test_a_client_certificate_subject_is_the_producer_and_one_is_required(
        mtls_kafka: KafkaListener, pki: TestPki, broker: BrokerProcess) -> None:
    topic = _topic()
    orders = pki.client_files("orders-service")
    assert await _aiokafka(mtls_kafka, "SSL", pki, topic, orders) == [b"v0", b"v1", b"v2"]
    cert, key = pki.client_files("librdkafka-client")
    librdkafka_topic = _topic()
    got = await asyncio.to_thread(_confluent, mtls_kafka, "SSL", pki, librdkafka_topic,
                                  **{"ssl.certificate.location": str(cert),
                                     "ssl.key.location": str(key)})
    assert got == [b"v0", b"v1", b"v2"]
    async with httpx.AsyncClient(base_url=broker.url) as http:
        for queue, producer in ((topic, "orders-service"),
                                (librdkafka_topic, "librdkafka-client")):
            r = await http.get(f"/api/v1/pop/queue/{queue}", params={"wait": "false"})
            assert r.status_code == 200, r.text
            assert r.json()["messages"][0]["producerSub"] == producer
    # Without a certificate the handshake is refused.
    without = AIOKafkaProducer(bootstrap_servers=mtls_kafka.bootstrap,
                               security_protocol="SSL", ssl_context=pki.client_context(),
                               request_timeout_ms=3000)
    with pytest.raises(KafkaConnectionError):
        await without.start()
    await without.stop()
