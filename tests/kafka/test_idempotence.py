"""Idempotent produce made durable by our dedup: an exact resend of a batch is answered
with the offsets it got the first time and writes nothing, after a restart of the listener
too, and on another listener process (another host) of the same database."""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.kafka.listener import KafkaListener
from tests.kafka.wire import batch, one_answer, produce_answer, produce_v3

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus


async def _end(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


async def test_a_resend_after_a_restart_writes_nothing(database_url: str,
                                                       tmp_path: Path) -> None:
    topic = f"idem-{uuid.uuid4().hex[:8]}"
    producer_id = random.randrange(10**12, 10**13)  # not one the sequence hands out soon
    first = batch([b"a", b"b", b"c"], producer_id=producer_id, epoch=0, sequence=0)
    second = batch([b"d", b"e"], producer_id=producer_id, epoch=0, sequence=3)
    log = tmp_path / "kafka.log"
    with KafkaListener(database_url, log_path=log) as kafka:
        await _create_by_metadata(kafka, topic)
        assert produce_answer(await one_answer(kafka.port, produce_v3(topic, first)),
                              topic) == (0, 0)
        assert produce_answer(await one_answer(kafka.port, produce_v3(topic, second)),
                              topic) == (0, 3)
        # Skipping ahead is refused while the process remembers the producer.
        gap = batch([b"x"], producer_id=producer_id, epoch=0, sequence=9)
        assert produce_answer(await one_answer(kafka.port, produce_v3(topic, gap)),
                              topic)[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        port = kafka.port
    with KafkaListener(database_url, port=port, log_path=log) as kafka:
        for resend, base in ((first, 0), (second, 3)):
            assert produce_answer(await one_answer(kafka.port, produce_v3(topic, resend)),
                                  topic) == (0, base)
        assert await _end(kafka.bootstrap, topic) == 5
    with KafkaListener(database_url, log_path=log) as other_host:
        assert produce_answer(await one_answer(other_host.port, produce_v3(topic, first)),
                              topic) == (0, 0)
        assert await _end(other_host.bootstrap, topic) == 5


async def _create_by_metadata(kafka: KafkaListener, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
    await producer.start()
    try:
        await producer.partitions_for(topic)
    finally:
        await producer.stop()


async def test_an_idempotent_client_produces_in_order(kafka: KafkaListener) -> None:
    """aiokafka's idempotent producer: InitProducerId, then sequenced batches."""
    topic = f"idem-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        offsets = [(await producer.send_and_wait(topic, str(i).encode())).offset
                   for i in range(10)]
    finally:
        await producer.stop()
    assert offsets == list(range(10))


async def test_a_transactional_producer_fails_fast(kafka: KafkaListener) -> None:
    """Transactions are not offered: the refusal is one clients treat as fatal, so a
    transactional producer fails at once rather than retrying forever."""
    from aiokafka.errors import KafkaError

    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap,
                                transactional_id=f"tx-{uuid.uuid4().hex[:8]}")
    try:
        async with asyncio.timeout(20):
            with pytest.raises(KafkaError):
                await producer.start()
    finally:
        await producer.stop()
