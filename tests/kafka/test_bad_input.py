"""Bad input on the Kafka port: each closes its connection (or answers Kafka's error
code), writes nothing, and the listener serves on."""

from __future__ import annotations

import struct
import uuid

import crc32c
from aiokafka import AIOKafkaProducer

from broker.kafka.records import OutRecord, encode_batch
from tests.kafka.listener import KafkaListener
from tests.kafka.wire import exchange, one_answer, produce_v3, request


async def still_serves(kafka: KafkaListener, topic: str | None = None) -> None:
    """A real client produces (to a new topic unless one is named)."""
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic or f"alive-{uuid.uuid4().hex[:8]}", b"ok")
        assert topic is not None or meta.offset == 0
    finally:
        await producer.stop()
    assert kafka.alive()


async def test_garbage_oversize_truncated_and_unknown_requests_close(
        kafka: KafkaListener) -> None:
    cases = {
        "garbage": b"\x00\x00\x00\x10" + bytes(range(16)),
        "negative length": struct.pack(">i", -5) + b"abc",
        "oversize": struct.pack(">i", 2**31 - 1) + b"x" * 100,
        "unknown key": request(999, 0, b""),
        "unsupported version": request(0, 1, b""),
        "truncated body": request(3, 1, b"\x00\x00\x00\x05\x00"),
        "short header": struct.pack(">i", 3) + b"\x00\x12\x00",
    }
    for name, data in cases.items():
        answer = await exchange(kafka.port, data)
        assert answer == b"", (name, answer)
    await still_serves(kafka)


async def test_api_versions_of_an_unknown_version_answers_our_table(
        kafka: KafkaListener) -> None:
    answer = await exchange(kafka.port, request(18, 99, b"", flexible=True), timeout=1)
    assert answer.endswith(b"<open>")
    _, correlation, code = struct.unpack_from(">iih", answer)
    assert (correlation, code) == (7, 35)  # UNSUPPORTED_VERSION, in a v0 body
    (count,) = struct.unpack_from(">i", answer, 10)
    keys = [struct.unpack_from(">hhh", answer, 14 + 6 * i) for i in range(count)]
    assert (18, 0, 3) in keys


async def test_a_hostile_batch_is_refused_and_writes_nothing(kafka: KafkaListener) -> None:
    topic = f"hostile-{uuid.uuid4().hex[:8]}"
    await still_serves(kafka, topic)  # one record before
    good = encode_batch([OutRecord(0, 0, None, b"a"), OutRecord(1, 0, None, b"b")])
    bad_crc = good[:-1] + bytes([good[-1] ^ 0xFF])
    fields = list(struct.unpack(">hiqqqhii", good[21:61]))
    fields[-1] = 2**31 - 1  # declares two billion records
    tail = struct.pack(">hiqqqhii", *fields) + good[61:]
    lying = struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, crc32c.crc32c(tail)) + tail
    for records in (bad_crc, lying, good + good[:20]):
        answer = await exchange(kafka.port, produce_v3(topic, records), timeout=2)
        # correlation, topics=1, name, partitions=1, index 0, error code
        code_at = 4 + 4 + 4 + 2 + len(topic) + 4 + 4
        (code,) = struct.unpack_from(">h", answer, code_at)
        assert code == 2, answer  # CORRUPT_MESSAGE
    # Only the record written before is there.
    from aiokafka import AIOKafkaConsumer, TopicPartition
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        assert await consumer.end_offsets([tp]) == {tp: 1}
    finally:
        await consumer.stop()
    await still_serves(kafka)


async def test_a_time_beyond_the_calendar_lists_no_offset(kafka: KafkaListener) -> None:
    """ListOffsets for a timestamp past year 9999 answers offset -1 (the fuzzer found it
    closing the connection on an error)."""
    topic = f"late-{uuid.uuid4().hex[:8]}"
    await still_serves(kafka, topic)
    body = (struct.pack(">i", -1) + struct.pack(">i", 1) + struct.pack(">h", len(topic))
            + topic.encode() + struct.pack(">i", 1) + struct.pack(">iq", 0, 2**62))
    answer = await one_answer(kafka.port, request(2, 1, body))
    at = 4 + 4 + 4 + 2 + len(topic) + 4
    assert struct.unpack_from(">ihqq", answer, at) == (0, 0, -1, -1)

