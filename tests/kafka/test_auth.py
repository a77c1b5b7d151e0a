"""Auth on: SASL/PLAIN where the password is a token of our auth; the token's roles decide
what the connection may do, with the HTTP routes' access levels."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError

from tests.kafka.listener import KafkaListener
from tests.kafka.wire import exchange, request
from tests.support import BrokerProcess
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
