"""What one Kafka client can make the listener hold: a Fetch's answer is capped whatever the
client asks (QUEEN_KAFKA_FETCH_MAX_BYTES, as Kafka's fetch.max.bytes), and an answer the
client does not read is given up after QUEEN_KAFKA_IDLE_SECONDS. Measured before the cap: a
Fetch asking 2**31-1 bytes of a topic holding 300 MB answered all 300 MB, the listener's
memory peaking at 750 MB for it."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Iterator

import psutil
import pytest
from aiokafka import AIOKafkaProducer

from tests.kafka.listener import KafkaListener
from tests.kafka.wire import batch, fetch_v4, one_answer, produce_answer, produce_v3

_CAP = 64 * 1024
_IDLE = 2


@pytest.fixture(scope="module")
def bounded(database_url: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[KafkaListener]:
    log = tmp_path_factory.mktemp("kafka-bounds") / "kafka.log"
    env = {"QUEEN_KAFKA_FETCH_MAX_BYTES": str(_CAP), "QUEEN_KAFKA_IDLE_SECONDS": str(_IDLE),
           "QUEEN_KAFKA_DEFAULT_PARTITIONS": "3"}
    with KafkaListener(database_url, env=env, log_path=log) as listener:
        yield listener
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text


async def _topic(kafka: KafkaListener, values: list[bytes], partitions: int = 3) -> str:
    """A new topic (3 partitions) with `values` in each of its first `partitions`."""
    topic = f"bounds-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
    await producer.start()
    try:
        await producer.partitions_for(topic)  # its Metadata request creates the topic
    finally:
        await producer.stop()
    for p in range(partitions):
        answer = await one_answer(kafka.port, produce_v3(topic, batch(values), partition=p))
        assert produce_answer(answer, topic)[0] == 0
    return topic


async def test_a_fetch_answers_at_most_the_cap_whatever_the_client_asks(
        bounded: KafkaListener) -> None:
    topic = await _topic(bounded, [os.urandom(16 * 1024) for _ in range(8)])  # 3 x 128 KiB
    for asked in (2**31 - 1, 0, -1):
        answer = await one_answer(bounded.port, fetch_v4(
            topic, [0, 1, 2], max_bytes=asked, partition_max_bytes=2**31 - 1))
        # the records' values, and a few hundred bytes of batch and answer framing
        assert _CAP // 2 < len(answer) <= _CAP + 4096, (asked, len(answer))


async def test_a_record_larger_than_the_cap_is_still_answered(bounded: KafkaListener) -> None:
    topic = await _topic(bounded, [os.urandom(3 * _CAP)], partitions=1)
    answer = await one_answer(bounded.port, fetch_v4(
        topic, [0, 1, 2], max_bytes=2**31 - 1, partition_max_bytes=2**31 - 1))
    assert 3 * _CAP < len(answer) < 3 * _CAP + 4096


def _connections_from(pid: int, port: int) -> list[str]:
    return [c.status for c in psutil.Process(pid).net_connections()
            if c.raddr and c.raddr[1] == port]


async def test_an_answer_the_client_does_not_read_is_given_up(bounded: KafkaListener) -> None:
    # One record larger than the socket buffers can take (it is answered despite the cap).
    topic = await _topic(bounded, [os.urandom(8 << 20)], partitions=1)
    assert bounded.proc is not None
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", bounded.port))
    try:
        client.sendall(fetch_v4(topic, [0], max_bytes=2**31 - 1,
                                partition_max_bytes=2**31 - 1))
        port = client.getsockname()[1]
        deadline = time.monotonic() + 5 * _IDLE
        await asyncio.sleep(_IDLE / 2)
        assert _connections_from(bounded.proc.pid, port) == ["ESTABLISHED"]
        while _connections_from(bounded.proc.pid, port) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert _connections_from(bounded.proc.pid, port) == []
    finally:
        client.close()


async def test_a_connection_that_sends_nothing_is_closed_after_the_idle_time(
        bounded: KafkaListener) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", bounded.port)
    try:
        started = time.monotonic()
        async with asyncio.timeout(5 * _IDLE):
            assert await reader.read(1) == b""
        assert time.monotonic() - started >= _IDLE * 0.9
    finally:
        writer.close()


async def test_a_client_reading_slowly_through_a_small_buffer_keeps_its_connection(
        bounded: KafkaListener) -> None:
    # It drains the kernel's queue steadily, while the socket takes nothing more from the
    # listener's buffer for longer than the idle time: that is progress, not a stall.
    topic = await _topic(bounded, [os.urandom(8 << 20)], partitions=1)
    assert bounded.proc is not None
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.settimeout(5)
    client.connect(("127.0.0.1", bounded.port))
    try:
        client.sendall(fetch_v4(topic, [0], max_bytes=2**31 - 1,
                                partition_max_bytes=2**31 - 1))
        port = client.getsockname()[1]
        started = time.monotonic()
        while time.monotonic() - started < 3 * _IDLE:
            assert client.recv(65536)
            await asyncio.sleep(0.02)
        assert _connections_from(bounded.proc.pid, port) == ["ESTABLISHED"]
    finally:
        client.close()
