"""Consumer groups through the Kafka listener: two aiokafka members share a topic's
partitions, rebalance when one leaves, and resume from committed offsets after a restart;
committed offsets are our group cursors (what a Queen group of the same name sees)."""

from __future__ import annotations

import asyncio
import struct
import uuid
from pathlib import Path

import asyncpg
import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.kafka.listener import KafkaListener
from tests.kafka.wire import decode, one_answer, request
from tests.support import cursor_row, pop_json

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def _produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for p in range(partitions):
            for i in range(per_partition):
                await producer.send(topic, f"{p}:{i}".encode(), partition=p)
        await producer.flush()
    finally:
        await producer.stop()


async def _committed_at(kafka: KafkaListener, group: str, topic: str,
                        offset: int) -> AIOKafkaConsumer:
    """A started consumer of `group` that committed `offset` on partition 0 (stop it)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    await consumer.commit({tp: offset})
    return consumer


def _member(bootstrap: str, topic: str, group: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                            auto_offset_reset="earliest", enable_auto_commit=False,
                            heartbeat_interval_ms=300, session_timeout_ms=6000,
                            metadata_max_age_ms=1000)


async def _take(consumer: AIOKafkaConsumer, seconds: float) -> list:  # type: ignore[type-arg]
    out: list = []  # type: ignore[type-arg]
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        batches = await consumer.getmany(timeout_ms=300)
        for records in batches.values():
            out.extend(records)
    return out


async def test_two_members_rebalance_and_resume_from_commits(
        database_url: str, tmp_path: Path) -> None:
    """...also across a restart of the listener (membership is lost with it, commits are
    not)."""
    kafka = KafkaListener(database_url, log_path=tmp_path / "kafka.log").start()
    try:
        await _rebalance_and_resume(kafka, database_url, tmp_path)
    finally:
        kafka.stop()


async def _rebalance_and_resume(kafka: KafkaListener, database_url: str,
                                tmp_path: Path) -> None:
    topic, group = _name("gt"), _name("grp")
    await _create(kafka.bootstrap, topic, 4)
    await _produce(kafka.bootstrap, topic, 5, 4)
    a, b = _member(kafka.bootstrap, topic, group), _member(kafka.bootstrap, topic, group)
    await a.start()
    await b.start()
    try:
        async with asyncio.timeout(30):
            while not (a.assignment() and b.assignment()
                       and len(a.assignment() | b.assignment()) == 4):
                await asyncio.gather(_take(a, 0.3), _take(b, 0.3))
        assert not a.assignment() & b.assignment()
        # Each member reads its own partitions from the start and commits.
        got_a, got_b = await asyncio.gather(_take(a, 2), _take(b, 2))
        await a.commit()
        await b.commit()
    finally:
        await b.stop()  # leaves the group: a takes every partition
    try:
        async with asyncio.timeout(30):
            while len(a.assignment()) != 4:
                await _take(a, 0.3)
        assert len(got_a) + len(got_b) <= 20
    finally:
        await a.stop()
    seen = {(r.partition, r.offset) for r in got_a + got_b}
    # After a restart of the listener, a new member resumes at the committed offsets.
    kafka.stop()
    kafka = KafkaListener(database_url, port=kafka.port, log_path=tmp_path / "kafka.log")
    kafka.start()
    c = _member(kafka.bootstrap, topic, group)
    await c.start()
    try:
        rest = await _take(c, 4)
    finally:
        await c.stop()
        kafka.stop()
    again = {(r.partition, r.offset) for r in rest}
    assert not seen & again
    assert seen | again == {(p, o) for p in range(4) for o in range(5)}


async def test_committed_offsets_are_queen_cursors(kafka: KafkaListener, http: httpx.AsyncClient,
                                                   db: asyncpg.Connection) -> None:
    """A Kafka commit of offset n sets the Queen cursor to n - 1: a Queen pop of the same
    group then starts at n; and OffsetFetch reads what Queen acks moved."""
    topic, group = _name("gq"), _name("shared")
    await _produce(kafka.bootstrap, topic, 6, 1)
    consumer = await _committed_at(kafka, group, topic, 4)
    tp = TopicPartition(topic, 0)
    try:
        row = await cursor_row(db, topic, group, "0")
        assert row is not None and row["committed"] == 3
        popped = await pop_json(http, topic, consumerGroup=group, batch=10, autoAck=True)
        assert popped is not None
        assert [m["data"] for m in popped["messages"]] == ["0:4", "0:5"]
        assert await consumer.committed(tp) == 6  # Queen's ack moved the group on
    finally:
        await consumer.stop()


async def test_list_describe_and_delete_groups(kafka: KafkaListener) -> None:
    topic, group = _name("gl"), _name("listed")
    await _produce(kafka.bootstrap, topic, 1, 1)
    consumer = await _committed_at(kafka, group, topic, 1)
    await consumer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        assert group in [g[0] for g in await admin.list_consumer_groups()]
        offsets = await admin.list_consumer_group_offsets(group)
        assert offsets[TopicPartition(topic, 0)].offset == 1
        deleted = await asyncio.to_thread(_delete_group, kafka.bootstrap, group)
        assert deleted == {group: "OK"}
        assert group not in [g[0] for g in await admin.list_consumer_groups()]
    finally:
        await admin.close()


def _delete_group(bootstrap: str, group: str) -> dict[str, str]:
    """kafka-python's DeleteGroups (aiokafka's admin client has none)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return admin.delete_groups([group])  # type: ignore[no-any-return]
    finally:
        admin.close()


async def test_the_kip848_heartbeat_is_listed_and_answered_unsupported_version(
        kafka: KafkaListener) -> None:
    """As a Kafka broker with the consumer protocol off: ApiVersions lists
    ConsumerGroupHeartbeat (68) v0-v1, and each heartbeat answers UNSUPPORTED_VERSION (35)
    with a message naming the remedy."""
    _, versions = decode(18, 3, (await one_answer(kafka.port, request(
        18, 3, b"\x05test\x021\x00", flexible=True)))[4:])
    assert {(k.api_key, k.min_version, k.max_version) for k in versions.api_keys} >= {
        (68, 0, 1), (17, 0, 1)}
    group = _name("k848").encode()
    for version in (0, 1):
        body = (bytes([len(group) + 1]) + group + b"\x01" + struct.pack(">i", 0)  # member, epoch
                + b"\x00" + b"\x00" + struct.pack(">i", 5000)  # no instance id, no rack
                + b"\x02\x02t")  # subscribed topic names: ["t"]
        if version == 1:
            body += b"\x00"  # no topic regex
        body += b"\x00" + b"\x00" + b"\x00"  # no assignor, no owned partitions, no tags
        correlation, answer = decode(68, version, (await one_answer(kafka.port, request(
            68, version, body, flexible=True)))[4:])
        assert (correlation, answer.error_code) == (7, 35), answer
        assert "group.protocol=classic" in (answer.error_message or "")
