"""confluent-kafka (librdkafka) against the Kafka listener: produce with keys, headers,
timestamps and each codec, consume, a consumer group that commits and resumes, topic
listings and a pattern subscription, the KIP-848 protocol declined clearly, and static
members (a group instance id) that keep their partitions across a restart, and
cooperative rebalancing (KIP-429), which moves only the partitions that change hands."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka.listener import KafkaListener

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all


def _topic() -> str:
    return f"ck-{uuid.uuid4().hex[:10]}"


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None,
                                                             list[tuple[str, bytes]], int]],
             **config: object) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    offsets: list[int] = []
    failures: list[object] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            failures.append(err)
        else:
            offsets.append(msg.offset())  # type: ignore[attr-defined]

    for key, value, headers, ts in records:
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=ts,
                         partition=0, on_delivery=report)
    assert producer.flush(20) == 0
    assert failures == []
    return offsets


def _consume(bootstrap: str, topic: str, count: int, **config: object) -> list:  # type: ignore[type-arg]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         **config})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list = []  # type: ignore[type-arg]
        for _ in range(100):
            if len(out) >= count:
                break
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            out.append(message)
        return out
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_librdkafka_round_trips(kafka: KafkaListener, codec: str) -> None:
    topic = _topic()
    records = [(f"k{i}".encode(), f"v{i}".encode() * 20, [("h", b"1"), ("h", b"2")],
                1_650_000_000_000 + i) for i in range(30)]
    records.append((None, None, [], 1_650_000_000_100))  # a tombstone
    offsets = await asyncio.to_thread(_produce, kafka.bootstrap, topic, records,
                                      **{"compression.type": codec})
    assert sorted(offsets) == list(range(31))
    got = await asyncio.to_thread(_consume, kafka.bootstrap, topic, 31)
    assert [(m.offset(), m.key(), m.value(), m.headers() or [], m.timestamp()[1])
            for m in got] == [(i, k, v, h, t) for i, (k, v, h, t) in enumerate(records)]


async def test_librdkafka_group_commits_and_resumes(kafka: KafkaListener) -> None:
    topic, group = _topic(), f"ckg-{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(_produce, kafka.bootstrap, topic,
                            [(None, str(i).encode(), [], 1_650_000_000_000) for i in range(6)])

    def read(count: int) -> list[bytes]:
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "session.timeout.ms": 6000})
        consumer.subscribe([topic])
        out = []
        try:
            for _ in range(60):
                message = consumer.poll(0.5)
                if message is None or message.error():
                    continue
                out.append(message.value())
                if len(out) == count:
                    consumer.commit(message=message, asynchronous=False)
                    break
            return out
        finally:
            consumer.close()

    assert await asyncio.to_thread(read, 4) == [b"0", b"1", b"2", b"3"]
    assert await asyncio.to_thread(read, 2) == [b"4", b"5"]


async def test_librdkafka_lists_topics_and_subscribes_by_pattern(kafka: KafkaListener) -> None:
    """Listing topics and a regex subscription send librdkafka's flexible Metadata request
    for all topics (tests/kafka/test_tolerance.py has its bytes)."""
    prefix = _topic()
    topics = [f"{prefix}-a", f"{prefix}-b"]
    for topic in topics:
        await asyncio.to_thread(_produce, kafka.bootstrap, topic,
                                [(None, topic.encode(), [], 1_650_000_000_000)])

    def listings() -> tuple[list[str], list[str]]:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        by_admin = sorted(t for t in admin.list_topics(timeout=10).topics
                          if t.startswith(prefix))
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused"})
        try:
            by_consumer = sorted(t for t in consumer.list_topics(timeout=10).topics
                                 if t.startswith(prefix))
        finally:
            consumer.close()
        return by_admin, by_consumer

    assert await asyncio.to_thread(listings) == (topics, topics)

    def by_pattern() -> list[tuple[str, bytes]]:
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap,
                             "group.id": f"ckp-{uuid.uuid4().hex[:8]}",
                             "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
        consumer.subscribe([f"^{prefix}-.*"])
        out: list[tuple[str, bytes]] = []
        try:
            for _ in range(60):
                message = consumer.poll(0.5)
                if message is None:
                    continue
                if message.error():
                    raise KafkaException(message.error())
                out.append((message.topic(), message.value()))
                if len(out) == 2:
                    break
            return sorted(out)
        finally:
            consumer.close()

    assert await asyncio.to_thread(by_pattern) == [(t, t.encode()) for t in topics]


async def test_group_protocol_consumer_fails_clearly(kafka: KafkaListener) -> None:
    """KIP-848's protocol is declined as a Kafka broker with it off declines it: the
    heartbeat answers UNSUPPORTED_VERSION, which librdkafka takes as fatal, instead of a
    consumer that waits for an assignment for ever."""
    topic = _topic()
    await asyncio.to_thread(_produce, kafka.bootstrap, topic,
                            [(None, b"x", [], 1_650_000_000_000)])

    def first_error() -> tuple[int, str] | None:
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap,
                             "group.id": f"ck848-{uuid.uuid4().hex[:8]}",
                             "group.protocol": "consumer", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        try:
            for _ in range(40):  # 20 s at most: the error comes within the first heartbeat
                message = consumer.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                assert error is not None, "a message was delivered without a group"
                return error.code(), error.str()
            return None
        finally:
            consumer.close()

    found = await asyncio.to_thread(first_error)
    assert found is not None, "no error: the consumer waits silently"
    code, text = found
    assert code == KafkaError._FATAL, text
    assert "ConsumerGroupHeartbeat" in text and "not supported" in text, text


class _Member:
    """A librdkafka consumer of a group, polling on a thread of its own: what it got, the
    partitions each rebalance gave and took, and the errors it saw. `config` adds to (or
    overrides) its settings: a group instance id, an assignment strategy."""

    def __init__(self, bootstrap: str, topic: str, group: str, **config: object) -> None:
        self.values: list[bytes] = []
        self.assignments: list[list[int]] = []
        self.revocations: list[list[int]] = []
        self.owned: set[int] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": True,
            "auto.commit.interval.ms": 200, "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 300, **config})
        self._consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _assigned(self, _consumer: object, partitions: list[TopicPartition]) -> None:
        given = sorted(p.partition for p in partitions)
        self.assignments.append(given)
        self.owned.update(given)

    def _revoked(self, _consumer: object, partitions: list[TopicPartition]) -> None:
        taken = sorted(p.partition for p in partitions)
        self.revocations.append(taken)
        self.owned.difference_update(taken)

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.1)
            if message is None:
                continue
            if message.error():
                self.errors.append(message.error().str())
            else:
                self.values.append(message.value())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()  # a static member sends no LeaveGroup: its place is kept


def _static(bootstrap: str, topic: str, group: str, instance: str) -> _Member:
    """A static member (KIP-345): a group instance id of its own."""
    return _Member(bootstrap, topic, group, **{"group.instance.id": instance})


async def _until(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        await asyncio.sleep(0.1)


async def _four_partitions(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for created in admin.create_topics([NewTopic(topic, num_partitions=4)]).values():
        await asyncio.to_thread(created.result, 10)


def _produce_forty(bootstrap: str, topic: str, first: int) -> None:
    """Messages `first` to `first + 39`, as their numbers' text, spread over 4 partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for n in range(first, first + 40):
        producer.produce(topic, value=str(n).encode(), partition=n % 4)
    assert producer.flush(20) == 0


async def test_static_members_keep_their_partitions_across_a_restart_and_are_fenced(
        kafka: KafkaListener) -> None:
    topic, group = _topic(), f"cks-{uuid.uuid4().hex[:8]}"
    await _four_partitions(kafka.bootstrap, topic)

    def got(*members: _Member) -> set[bytes]:
        return {v for m in members for v in m.values}

    a = _static(kafka.bootstrap, topic, group, "a")
    b = _static(kafka.bootstrap, topic, group, "b")
    members = [a, b]
    try:
        await asyncio.to_thread(_produce_forty, kafka.bootstrap, topic, 0)
        await _until(lambda: len(got(a, b)) == 40 and a.assignments[-1:] != [[]]
                     and b.assignments[-1:] != [[]], 30, "both members share the 40 messages")
        assert a.errors == b.errors == []
        assert sorted(a.assignments[-1] + b.assignments[-1]) == [0, 1, 2, 3]
        settled_a = list(a.assignments)
        b_partitions = b.assignments[-1]

        # "b" restarts under its instance id: it gets its partitions back, "a" is not
        # disturbed (no new assignment), and the messages after it are read once.
        await asyncio.to_thread(b.close)
        restarted = _static(kafka.bootstrap, topic, group, "b")
        members.append(restarted)
        await _until(lambda: bool(restarted.assignments), 20, "the restarted member's partitions")
        assert restarted.assignments == [b_partitions]
        await asyncio.to_thread(_produce_forty, kafka.bootstrap, topic, 40)
        await _until(lambda: len(got(a, b, restarted)) == 80, 20, "the 40 messages after it")
        assert a.assignments == settled_a
        assert restarted.errors == [] and a.errors == []

        # A second consumer under the same instance id takes the place; the one it
        # replaced is fenced.
        twin = _static(kafka.bootstrap, topic, group, "b")
        members.append(twin)
        await _until(lambda: bool(twin.assignments), 20, "the twin's partitions")
        await _until(lambda: any("fenced" in e.lower() for e in restarted.errors), 20,
                     f"the replaced member learns it is fenced: {restarted.errors}")
    finally:
        for member in members:
            if not member._stop.is_set():
                await asyncio.to_thread(member.close)


async def test_cooperative_members_move_only_the_partitions_that_change_hands(
        kafka: KafkaListener) -> None:
    # librdkafka's cooperative-sticky assignor (KIP-429): a member that joins takes
    # partitions from the others without their giving up the rest, in two rounds of
    # JoinGroup and SyncGroup, and a member that leaves hands its own back the same way.
    topic, group = _topic(), f"ckc-{uuid.uuid4().hex[:8]}"
    await _four_partitions(kafka.bootstrap, topic)

    cooperative = {"partition.assignment.strategy": "cooperative-sticky"}
    a = _Member(kafka.bootstrap, topic, group, **cooperative)
    members = [a]
    try:
        await asyncio.to_thread(_produce_forty, kafka.bootstrap, topic, 0)
        await _until(lambda: len(a.values) == 40 and a.owned == {0, 1, 2, 3}, 30,
                     f"the first member reads all 40: {len(a.values)}, {a.owned}")
        await asyncio.sleep(0.5)  # past an auto-commit of what it read

        b = _Member(kafka.bootstrap, topic, group, **cooperative)
        members.append(b)
        await _until(lambda: len(a.owned) == 2 and len(b.owned) == 2, 30,
                     f"the two members share the four partitions: {a.owned}, {b.owned}")
        assert a.owned | b.owned == {0, 1, 2, 3}
        # Incremental: "a" gave up only what "b" took, never all it had.
        assert [sorted(b.owned)] == [r for r in a.revocations if r], a.revocations
        await asyncio.to_thread(_produce_forty, kafka.bootstrap, topic, 40)
        await _until(lambda: len(a.values) + len(b.values) == 80, 20, "the next 40, once each")

        await asyncio.to_thread(b.close)  # leaves the group: its partitions go back to "a"
        await _until(lambda: a.owned == {0, 1, 2, 3}, 30, f"all back with the first: {a.owned}")
        await asyncio.to_thread(_produce_forty, kafka.bootstrap, topic, 80)
        await _until(lambda: len(a.values) + len(b.values) == 120, 20, "the last 40")
        values = a.values + b.values
        assert sorted(values, key=int) == [str(n).encode() for n in range(120)]
        assert a.errors == b.errors == []
    finally:
        for member in members:
            if not member._stop.is_set():
                await asyncio.to_thread(member.close)
