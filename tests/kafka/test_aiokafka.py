"""aiokafka against the Kafka listener: every codec, keys, headers, timestamps; a long-poll
Fetch woken by a push; a static group member."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.kafka.listener import KafkaListener

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all


def _topic() -> str:
    return f"ak-{uuid.uuid4().hex[:10]}"


async def _consume(bootstrap: str, topic: str, count: int, **options: object) -> list:  # type: ignore[type-arg]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, **options)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        out: list = []  # type: ignore[type-arg]
        async with asyncio.timeout(20):
            while len(out) < count:
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    out.extend(records)
        return out
    finally:
        await consumer.stop()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_each_codec_round_trips(kafka: KafkaListener, codec: str) -> None:
    topic = _topic()
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, compression_type=codec,
                                linger_ms=20)
    await producer.start()
    try:
        sent = [(f"key-{i}".encode(), (f"value {i} " * 50).encode(),
                 [("trace", b"t"), ("trace", b"u")], 1_600_000_000_000 + i)
                for i in range(50)]
        futures = [await producer.send(topic, key=k, value=v, headers=h, timestamp_ms=t)
                   for k, v, h, t in sent]
        offsets = [(await f).offset for f in futures]
    finally:
        await producer.stop()
    assert offsets == list(range(50))
    got = await _consume(kafka.bootstrap, topic, 50)
    assert [(m.offset, m.key, m.value, list(m.headers), m.timestamp) for m in got] == [
        (i, k, v, h, t) for i, (k, v, h, t) in enumerate(sent)]


async def test_a_parked_fetch_is_woken_by_a_push(kafka: KafkaListener) -> None:
    """A consumer waiting on an empty partition (fetch_max_wait_ms 10 s) gets a record soon
    after it is produced, not at the end of its wait."""
    topic = _topic()
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"first")
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap,
                                    auto_offset_reset="latest", enable_auto_commit=False,
                                    fetch_max_wait_ms=10_000)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            await consumer.seek_to_end(TopicPartition(topic, 0))
            waiting = asyncio.create_task(consumer.getone())
            await asyncio.sleep(1.0)  # the fetch is parked by now
            sent_at = time.monotonic()
            await producer.send_and_wait(topic, b"second")
            record = await asyncio.wait_for(waiting, 15)
            assert record.value == b"second"
            assert time.monotonic() - sent_at < 5.0
        finally:
            await consumer.stop()
    finally:
        await producer.stop()


async def test_a_static_member_consumes_and_commits(kafka: KafkaListener) -> None:
    """aiokafka's static membership (group_instance_id: JoinGroup v5, SyncGroup, heartbeats
    and commits that name the instance)."""
    topic, group = _topic(), f"aks-{uuid.uuid4().hex[:8]}"

    async def produce(values: range) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
        await producer.start()
        try:
            for i in values:
                await producer.send_and_wait(topic, str(i).encode())
        finally:
            await producer.stop()

    async def read(count: int) -> list[bytes]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka.bootstrap, group_id=group,
                                    group_instance_id="instance-1", enable_auto_commit=False,
                                    auto_offset_reset="earliest", session_timeout_ms=10000)
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(20):
                while len(got) < count:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got.extend(r.value for r in records if r.value is not None)
            await consumer.commit()
            return got
        finally:
            await consumer.stop()

    await produce(range(10))
    assert await read(10) == [str(i).encode() for i in range(10)]
    await produce(range(10, 12))  # the same instance, started again, resumes at its commit
    assert await read(2) == [b"10", b"11"]
