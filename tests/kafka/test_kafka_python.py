"""kafka-python (3.x) against the Kafka listener: produce and consume with keys, headers and
timestamps, each codec it has, offsets by position and time, and what the two kinds of
clients see of each other's messages (docs/kafka.md, "Kafka and Queen clients")."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from datetime import UTC, datetime

import httpx
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from queen.http.pop_frames import decode_pop_frames

from tests.kafka.listener import KafkaListener
from tests.support import pop_json, push_items

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all


def _topic() -> str:
    return f"kp-{uuid.uuid4().hex[:10]}"


def _consume(bootstrap: str, topic: str, count: int, partition: int = 0) -> list:  # type: ignore[type-arg]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition(topic, partition)])
        out = []
        for message in consumer:
            out.append(message)
            if len(out) == count:
                break
        return out
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_records_round_trip_exactly(kafka: KafkaListener, codec: str | None) -> None:
    topic = _topic()
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, compression_type=codec,
                             linger_ms=5)
    sent = [(f"k{i}".encode(), f'{{"n": {i}}}'.encode(), [("h", b"a"), ("h", b"b"),
                                                          ("x", b"")], 1_700_000_000_000 + i)
            for i in range(20)]
    futures = [producer.send(topic, key=k, value=v, headers=h, timestamp_ms=t)
               for k, v, h, t in sent]
    offsets = [f.get(timeout=15).offset for f in futures]
    producer.close()
    assert offsets == list(range(20))
    got = _consume(kafka.bootstrap, topic, 20)
    assert [(m.offset, m.key, m.value, m.headers, m.timestamp) for m in got] == [
        (i, k, v, h, t) for i, (k, v, h, t) in enumerate(sent)]


def test_list_offsets_by_position_and_time(kafka: KafkaListener) -> None:
    topic = _topic()
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)
    producer.send(topic, b"1").get(timeout=15)
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    producer.send(topic, b"2").get(timeout=15)
    producer.send(topic, b"3").get(timeout=15)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 3}
        found = consumer.offsets_for_times({tp: middle})
        assert found[tp] is not None and found[tp].offset == 1
        assert middle <= found[tp].timestamp < middle + 60_000  # its append time
        assert consumer.offsets_for_times({tp: int(time.time() * 1000) + 60_000})[tp] is None
    finally:
        consumer.close()


async def test_a_queen_client_pops_what_kafka_produced(kafka: KafkaListener,
                                                        http: httpx.AsyncClient) -> None:
    """JSON values are popped as that JSON; text as a JSON string; other bytes as a JSON
    string of their base64; a null value as null."""
    topic = _topic()
    values = [b'{"order": 7, "items": [1, 2]}', b"hello world", b"\xff\x00\x01", None, b"12"]

    def produce() -> None:
        producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)
        for value in values:
            producer.send(topic, key=b"k", value=value).get(timeout=15)
        producer.close()

    await asyncio.to_thread(produce)
    popped = await pop_json(http, topic, batch=10, autoAck=True)
    assert popped is not None
    assert popped["partition"] == "0"
    assert [m["data"] for m in popped["messages"]] == [
        {"order": 7, "items": [1, 2]}, "hello world",
        base64.b64encode(b"\xff\x00\x01").decode(), None, 12]


async def test_the_framed_pop_of_kafka_records_carries_json_payloads(
        kafka: KafkaListener, http: httpx.AsyncClient) -> None:
    """The official client's framed pop decodes a segment written through Kafka (its
    side-car never reaches the client), in every group: the whole segment, or a part."""
    topic = _topic()

    def produce() -> None:
        producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=50)
        futures = [producer.send(topic, key=b"k", value=v, headers=[("h", b"1")])
                   for v in (b'{"a": 1}', b"text", b"\x00\xff", b"[1]")]
        for future in futures:
            future.get(timeout=15)
        producer.close()

    await asyncio.to_thread(produce)
    expected = [{"a": 1}, "text", base64.b64encode(b"\x00\xff").decode(), [1]]
    for group, batch in (("whole", 4), ("part", 1)):
        r = await http.get(f"/api/v1/pop/queue/{topic}", params={
            "wait": "false", "batch": str(batch), "frames": "true", "autoAck": "true",
            "consumerGroup": group})
        assert r.status_code == 200, r.text
        got = decode_pop_frames(r.content)
        assert [m["data"] for m in got["messages"]] == expected[:batch]


async def test_a_kafka_consumer_fetches_what_a_queen_client_pushed(
        kafka: KafkaListener, http: httpx.AsyncClient) -> None:
    """A Queen message reads as: no key, no headers, the payload's JSON text as value, its
    append time as timestamp."""
    topic = _topic()
    before = datetime.now(UTC).timestamp() * 1000
    await push_items(http, topic, [{"a": 1}, "text", None, [1, 2]], partition="0")
    got = await asyncio.to_thread(_consume, kafka.bootstrap, topic, 4)
    assert [(m.key, m.value, m.headers) for m in got] == [
        (None, b'{"a":1}', []), (None, b'"text"', []), (None, b"null", []),
        (None, b"[1,2]", [])]
    assert all(before - 1000 <= m.timestamp <= before + 60_000 for m in got)


def test_unknown_partition_and_topic_creation(kafka: KafkaListener) -> None:
    """Metadata auto-creates a topic with the default width (1); partition 1 does not exist."""
    topic = _topic()
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, max_block_ms=5000)
    try:
        assert producer.partitions_for(topic) == {0}
        with pytest.raises(Exception):  # noqa: B017 - kafka-python's own assertion
            producer.send(topic, b"x", partition=1).get(timeout=10)
    finally:
        producer.close()


def test_a_group_consumer_commits_and_the_next_resumes(kafka: KafkaListener) -> None:
    topic, group = _topic(), f"kpg-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)
    for i in range(6):
        producer.send(topic, str(i).encode()).get(timeout=15)
    producer.close()

    def read(count: int) -> list[bytes]:
        consumer = KafkaConsumer(topic, bootstrap_servers=kafka.bootstrap, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 consumer_timeout_ms=8000)
        try:
            out = []
            for message in consumer:
                out.append(message.value)
                if len(out) == count:
                    consumer.commit()
                    break
            return out
        finally:
            consumer.close()

    assert read(4) == [b"0", b"1", b"2", b"3"]
    assert read(2) == [b"4", b"5"]


def test_create_and_delete_topics(kafka: KafkaListener) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    topic = _topic()
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 3, 1)])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, 5, 1)])
        producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)
        assert producer.partitions_for(topic) == {0, 1, 2}
        producer.send(topic, b"x", partition=2).get(timeout=15)
        producer.close()
        admin.delete_topics([topic])
        assert topic not in admin.list_topics()
    finally:
        admin.close()
