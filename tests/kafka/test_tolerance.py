"""What Kafka's own request parser steps over, the listener steps over too: tagged fields it
does not know (KIP-482), in the request header and at every level of the body, and bytes
past the end of a request's body. librdkafka depends on both (its flexible Metadata request
for all topics); the real clients' side is in test_confluent.py."""

from __future__ import annotations

import struct
import uuid

from aiokafka import AIOKafkaProducer

from tests.kafka.listener import KafkaListener
from tests.kafka.wire import answers, batch, decode, exchange, one_answer

METADATA, PRODUCE, FIND_COORDINATOR, API_VERSIONS = 3, 0, 10, 18


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact(text: bytes) -> bytes:
    return _varint(len(text) + 1) + text


def _tags(*fields: tuple[int, bytes]) -> bytes:
    """A tagged-field section with these (tag, value) fields."""
    return _varint(len(fields)) + b"".join(_varint(t) + _varint(len(v)) + v for t, v in fields)


def _frame(key: int, version: int, body: bytes, *, header_tags: bytes | None = None,
           correlation: int = 11) -> bytes:
    """A request frame; `header_tags` given: a flexible header (v2) with that section."""
    payload = struct.pack(">hhih", key, version, correlation, 4) + b"test"
    if header_tags is not None:
        payload += header_tags
    payload += body
    return struct.pack(">i", len(payload)) + payload


async def _topic_with_a_record(kafka: KafkaListener) -> str:
    topic = f"tol-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"one", partition=0)
    finally:
        await producer.stop()
    return topic


async def test_librdkafkas_metadata_request_for_all_topics_is_answered(
        kafka: KafkaListener) -> None:
    """librdkafka 2.x leaves three bytes of its four-byte array-count slot in a flexible
    Metadata request for all topics. Kafka reads a null topic array, the three flags, then
    the flag it really sent as a tagged-field count: with auto-creation off, 0 and three
    bytes past the body; with it on, one unknown tagged field (tag 0, empty) and one byte
    past the body. Both answer every topic."""
    topic = await _topic_with_a_record(kafka)
    for allow_auto_create in (0, 1):
        body = b"\x00\x00\x00\x00" + bytes([allow_auto_create]) + b"\x00\x00" + b"\x00"
        answer = await one_answer(kafka.port, _frame(METADATA, 9, body, header_tags=b"\x00"))
        correlation, metadata = decode(METADATA, 9, answer[4:])
        assert correlation == 11
        assert topic in {t.name for t in metadata.topics}, allow_auto_create
        assert [b.node_id for b in metadata.brokers] == [0]


async def test_unknown_tagged_fields_are_skipped_in_the_header_and_at_every_level(
        kafka: KafkaListener) -> None:
    topic = await _topic_with_a_record(kafka)
    name = _compact(topic.encode())
    junk = (7, b"\xde\xad")
    # Metadata v9 for one topic: tags in the header, the topic entry and the body.
    plain = _frame(METADATA, 9, b"\x02" + name + _tags() + b"\x00\x00\x00" + _tags(),
                   header_tags=_tags())
    tagged = _frame(METADATA, 9, b"\x02" + name + _tags(junk, (300, b"x" * 200))
                    + b"\x00\x00\x00" + _tags((9, b"")), header_tags=_tags(junk, (0, b"")))
    expected = decode(METADATA, 9, (await one_answer(kafka.port, plain))[4:])
    assert decode(METADATA, 9, (await one_answer(kafka.port, tagged))[4:]) == expected
    assert [t.name for t in expected[1].topics] == [topic]
    # FindCoordinator v3 and ApiVersions v3: tags in the header and the body.
    group = _compact(f"tol-group-{uuid.uuid4().hex[:6]}".encode())
    for key, body in ((FIND_COORDINATOR, group + b"\x00"),
                      (API_VERSIONS, _compact(b"test") + _compact(b"1"))):
        plain = _frame(key, 3, body + _tags(), header_tags=_tags())
        tagged = _frame(key, 3, body + _tags(junk), header_tags=_tags(junk))
        assert (decode(key, 3, (await one_answer(kafka.port, tagged))[4:])
                == decode(key, 3, (await one_answer(kafka.port, plain))[4:]))
    # Produce v9: tags on the partition, the topic, the body and the header; the record is
    # written after the one already there.
    records = batch([b"two"])
    body = (b"\x00" + struct.pack(">hi", -1, 5000) + b"\x02" + name + b"\x02"
            + struct.pack(">i", 0) + _varint(len(records) + 1) + records + _tags(junk)
            + _tags(junk) + _tags(junk))
    answer = await one_answer(kafka.port, _frame(PRODUCE, 9, body, header_tags=_tags(junk)))
    _, produced = decode(PRODUCE, 9, answer[4:])
    partition = produced.responses[0].partition_responses[0]
    assert (partition.error_code, partition.base_offset) == (0, 1)


async def test_bytes_past_a_requests_body_are_ignored(kafka: KafkaListener) -> None:
    topic = await _topic_with_a_record(kafka)
    v1 = struct.pack(">i", 1) + struct.pack(">h", len(topic)) + topic.encode()
    plain = await one_answer(kafka.port, _frame(METADATA, 1, v1))
    assert await one_answer(kafka.port, _frame(METADATA, 1, v1 + b"junk")) == plain
    v9 = b"\x02" + _compact(topic.encode()) + b"\x00" + b"\x00\x00\x00\x00"
    plain = await one_answer(kafka.port, _frame(METADATA, 9, v9, header_tags=b"\x00"))
    past = await one_answer(kafka.port, _frame(METADATA, 9, v9 + b"\x05\x01\x02",
                                               header_tags=b"\x00"))
    assert past == plain
    # The connection serves on: two requests with bytes past their ends, both answered.
    both = await exchange(kafka.port, _frame(METADATA, 1, v1 + b"x", correlation=1)
                          + _frame(METADATA, 1, v1 + b"yy", correlation=2), timeout=2)
    assert [struct.unpack_from(">i", a)[0] for a in answers(both)] == [1, 2]
    assert both.endswith(b"<open>")


async def test_a_declared_length_past_the_end_still_closes(kafka: KafkaListener) -> None:
    """Stepping over what follows the body is no licence to read past the frame: a tagged
    field, a string or an array that claims more bytes than there are closes the
    connection, as before."""
    name = _compact(b"t")
    cases = [
        _frame(METADATA, 9, b"\x02" + name + b"\x01\x07\x7f" + b"\x00" * 4, header_tags=b"\x00"),
        _frame(METADATA, 9, b"\x00\x00\x00\x00\x00", header_tags=b"\x01\x01\x7fab"),
        _frame(METADATA, 9, b"\x02\x7ft" + b"\x00" * 4, header_tags=b"\x00"),
        _frame(METADATA, 1, struct.pack(">i", 3) + struct.pack(">h", 1) + b"t"),
    ]
    for data in cases:
        assert await exchange(kafka.port, data) == b"", data
    assert kafka.alive()
