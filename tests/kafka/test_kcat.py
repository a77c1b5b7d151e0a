"""kcat (Debian's package, librdkafka underneath) against the Kafka listener: produce keys
and headers, consume keys, headers and timestamps, with a codec. .ci/run installs kcat; a
machine without it fails these tests rather than skipping them."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.kafka.listener import KafkaListener

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all

_FORMAT = "%o|%k|%s|%h|%T\\n"


def _kcat(*args: str, stdin: bytes | None = None) -> str:
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is not installed (Debian package kcat; .ci/run installs it)"
    done = subprocess.run([kcat, *args], input=stdin, capture_output=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()


async def test_kcat_produces_keys_and_headers(kafka: KafkaListener) -> None:
    topic = f"kc-{uuid.uuid4().hex[:8]}"
    lines = b"".join(f"key{i}:value {i}\n".encode() for i in range(5))
    await asyncio.to_thread(_kcat, "-b", kafka.bootstrap, "-t", topic, "-P", "-K:", "-p", "0",
                            "-z", "lz4", "-H", "source=kcat", "-H", "source=again", stdin=lines)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        got = [await consumer.getone() for _ in range(5)]
    finally:
        await consumer.stop()
    assert [(m.key, m.value, list(m.headers)) for m in got] == [
        (f"key{i}".encode(), f"value {i}".encode(),
         [("source", b"kcat"), ("source", b"again")]) for i in range(5)]
    # kcat reads back the same records, with the timestamps its producer set.
    text = await asyncio.to_thread(_kcat, "-b", kafka.bootstrap, "-t", topic, "-C", "-p", "0",
                                   "-o", "beginning", "-e", "-f", _FORMAT)
    assert text.splitlines() == [
        f"{m.offset}|{m.key.decode()}|{m.value.decode()}|source=kcat,source=again|"
        f"{m.timestamp}" for m in got]


async def test_kcat_consumes_keys_headers_and_timestamps(kafka: KafkaListener) -> None:
    topic = f"kc-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, compression_type="gzip")
    await producer.start()
    try:
        for i in range(3):
            await producer.send_and_wait(topic, f"v{i}".encode(), key=f"k{i}".encode(),
                                         headers=[("a", b"1"), ("b", b"2")],
                                         timestamp_ms=1_500_000_000_000 + i)
    finally:
        await producer.stop()
    text = await asyncio.to_thread(_kcat, "-b", kafka.bootstrap, "-t", topic, "-C", "-p", "0",
                                   "-o", "beginning", "-e", "-f", _FORMAT)
    assert text.splitlines() == [f"{i}|k{i}|v{i}|a=1,b=2|{1_500_000_000_000 + i}"
                                 for i in range(3)]
    listing = await asyncio.to_thread(_kcat, "-b", kafka.bootstrap, "-L", "-t", topic)
    assert f'topic "{topic}" with 1 partitions' in listing
