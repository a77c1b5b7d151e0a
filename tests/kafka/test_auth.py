"""Auth on: SASL/PLAIN where the password is a token of our auth; the token's roles decide
what the connection may do, with the HTTP routes' access levels. aiokafka, librdkafka (kcat,
confluent-kafka) and kafka-python authenticate, through both SaslHandshake versions."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import struct
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaPartition

from tests.doc_blocks import blocks
from tests.kafka.listener import KafkaListener
from tests.kafka.wire import answers, exchange, request
from tests.support import ROOT, BrokerProcess
from tests.tokens import AUTH_ENV, AUTH_SECRET, Signer, bearer

SIGNER = Signer(AUTH_SECRET, "HS256")


@pytest.fixture(scope="module")
def auth_kafka(database_url: str, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[KafkaListener]:
    log = tmp_path_factory.mktemp("kafka-auth") / "kafka.log"
    with KafkaListener(database_url, env=AUTH_ENV, log_path=Path(log)) as listener:
        yield listener
    assert "Traceback" not in log.read_text(errors="replace")


def _sasl(token: str) -> dict[str, str]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "ignored", "sasl_plain_password": token}


async def test_a_read_write_token_produces_and_a_read_only_token_reads(
        auth_kafka: KafkaListener, auth_broker: BrokerProcess) -> None:
    topic = f"auth-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(bootstrap_servers=auth_kafka.bootstrap,
                                **_sasl(SIGNER.token("writer", role="read-write")))
    await producer.start()
    try:
        assert (await producer.send_and_wait(topic, b'{"n": 1}')).offset == 0
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=auth_kafka.bootstrap,
                                auto_offset_reset="earliest",
                                **_sasl(SIGNER.token("reader", role="read-only")))
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        record = await consumer.getone()
        assert record.value == b'{"n": 1}'
    finally:
        await consumer.stop()
    # The producer's token subject is stamped on the message, as on an HTTP push.
    async with httpx.AsyncClient(base_url=auth_broker.url) as http:
        r = await http.get(f"/api/v1/pop/queue/{topic}", params={"wait": "false"},
                           headers=bearer(SIGNER.token("popper", role="read-write")))
        assert r.status_code == 200, r.text
        assert r.json()["messages"][0]["producerSub"] == "writer"


async def test_a_token_without_write_access_cannot_produce(auth_kafka: KafkaListener) -> None:
    topic = f"auth-{uuid.uuid4().hex[:8]}"
    writer = AIOKafkaProducer(bootstrap_servers=auth_kafka.bootstrap,
                              **_sasl(SIGNER.token("writer", role="read-write")))
    await writer.start()
    try:
        await writer.send_and_wait(topic, b"1")
    finally:
        await writer.stop()
    reader = AIOKafkaProducer(bootstrap_servers=auth_kafka.bootstrap,
                              request_timeout_ms=5000,
                              **_sasl(SIGNER.token("reader", role="read-only")))
    await reader.start()
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            await reader.send_and_wait(topic, b"2")
    finally:
        await reader.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=auth_kafka.bootstrap,
                                **_sasl(SIGNER.token("reader", role="read-only")))
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        assert await consumer.end_offsets([tp]) == {tp: 1}  # nothing was written
    finally:
        await consumer.stop()


async def test_bad_tokens_and_unauthenticated_requests_are_refused(
        auth_kafka: KafkaListener) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=auth_kafka.bootstrap,
                                **_sasl(Signer("x" * 40, "HS256").token(role="admin")))
    with pytest.raises(KafkaError):
        await producer.start()
    await producer.stop()
    # Metadata v1 before any SASL: the connection is closed with no answer.
    assert await exchange(auth_kafka.port, request(3, 1, b"\xff\xff\xff\xff")) == b""
    assert auth_kafka.alive()


def _kcat(*args: str, stdin: bytes | None = None) -> str:
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is not installed (Debian package kcat; .ci/run installs it)"
    done = subprocess.run([kcat, *args], input=stdin, capture_output=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()


async def test_librdkafka_clients_authenticate(auth_kafka: KafkaListener) -> None:
    """kcat (librdkafka 2.0) enables SASL only when SaslHandshake v0 is in the advertised
    range; confluent-kafka's newer librdkafka takes any overlap. Both authenticate, produce,
    consume and list topics."""
    token = SIGNER.token("rd", role="read-write")
    topic = f"auth-rd-{uuid.uuid4().hex[:8]}"
    sasl = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
            "-X", "sasl.username=any", "-X", f"sasl.password={token}"]
    await asyncio.to_thread(_kcat, "-b", auth_kafka.bootstrap, *sasl, "-t", topic, "-P",
                            "-p", "0", stdin=b"from kcat\n")
    config = {"bootstrap.servers": auth_kafka.bootstrap, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "PLAIN", "sasl.username": "any", "sasl.password": token}

    def with_confluent_kafka() -> tuple[list[bytes], list[str]]:
        producer = Producer(config)
        producer.produce(topic, b"from confluent-kafka", partition=0)
        assert producer.flush(20) == 0
        consumer = Consumer({**config, "group.id": f"auth-{uuid.uuid4().hex[:8]}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            listed = [t for t in consumer.list_topics(timeout=10).topics if t == topic]
            consumer.assign([ConfluentPartition(topic, 0, 0)])
            values = []
            for _ in range(40):
                message = consumer.poll(0.5)
                if message is None:
                    continue
                assert message.error() is None, message.error()
                values.append(message.value())
                if len(values) == 2:
                    break
            return values, listed
        finally:
            consumer.close()

    assert await asyncio.to_thread(with_confluent_kafka) == (
        [b"from kcat", b"from confluent-kafka"], [topic])
    text = await asyncio.to_thread(_kcat, "-b", auth_kafka.bootstrap, *sasl, "-t", topic,
                                   "-C", "-o", "beginning", "-e", "-f", "%o %s\\n")
    assert text.splitlines() == ["0 from kcat", "1 from confluent-kafka"]
    listing = await asyncio.to_thread(_kcat, "-b", auth_kafka.bootstrap, *sasl, "-L")
    assert f'topic "{topic}" with 1 partitions' in listing


async def test_the_guides_sasl_example_runs_as_written(auth_kafka: KafkaListener) -> None:
    """The kcat block of docs/guide/kafka.md's "Authentication", with the test's listener
    address and a topic of its own."""
    page = ROOT / "docs" / "guide" / "kafka.md"
    found, _ = blocks(page.read_text(), "docs/guide/kafka.md")
    [block] = [b for b in found if "sasl.mechanism=PLAIN" in b.code]
    topic = f"auth-doc-{uuid.uuid4().hex[:8]}"
    code = block.code.replace("localhost:9092", auth_kafka.bootstrap)
    code = re.sub(r"-t orders\b", f"-t {topic}", code)
    assert auth_kafka.bootstrap in code and topic in code
    env = {**os.environ, "TOKEN": SIGNER.token("doc", role="read-write")}
    done = await asyncio.to_thread(subprocess.run, ["bash", "-euo", "pipefail", "-c", code],
                                   env=env, capture_output=True, text=True, timeout=60,
                                   check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == '{"id": 1}', done.stdout


async def test_sasl_handshake_v0_then_a_bare_plain_message(auth_kafka: KafkaListener) -> None:
    """After SaslHandshake v0 the PLAIN message comes as a bare frame, answered by an empty
    frame (Kafka's exchange before KIP-152); a refused one closes without an answer."""
    plain = b"\x00any\x00" + SIGNER.token("bare", role="read-only").encode()
    handshake = request(17, 0, struct.pack(">h", 5) + b"PLAIN", correlation=1)
    metadata = request(3, 1, struct.pack(">i", 0), correlation=2)  # no topics: brokers only
    got = answers(await exchange(auth_kafka.port, handshake
                                 + struct.pack(">i", len(plain)) + plain + metadata, timeout=2))
    assert got[0] == struct.pack(">ihi", 1, 0, 1) + struct.pack(">h", 5) + b"PLAIN"
    assert got[1] == b""  # the bare message's answer: an empty frame
    assert struct.unpack_from(">i", got[2]) == (2,)  # authenticated: Metadata is answered
    bad = b"\x00any\x00" + Signer("y" * 40, "HS256").token(role="admin").encode()
    assert await exchange(auth_kafka.port, handshake + struct.pack(">i", len(bad)) + bad
                          + metadata) == struct.pack(">i", len(got[0])) + got[0]
    # kafka-python told the broker is 0.11 uses this exchange (SaslHandshake v0).
    config = {"bootstrap_servers": auth_kafka.bootstrap, "api_version": (0, 11),
              **_sasl(SIGNER.token("old", role="read-write"))}
    topic = f"auth-v0-{uuid.uuid4().hex[:8]}"

    def old_client() -> list[bytes]:
        producer = KafkaProducer(**config)
        try:
            assert producer.send(topic, b"v0", partition=0).get(timeout=15).offset == 0
        finally:
            producer.close()
        consumer = KafkaConsumer(auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                                 **config)
        try:
            consumer.assign([KafkaPartition(topic, 0)])
            return [m.value for m in consumer]
        finally:
            consumer.close()

    assert await asyncio.to_thread(old_client) == [b"v0"]
