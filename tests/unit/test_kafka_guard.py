"""The walk before kio reads a request (broker/kafka/guard.py): what Kafka steps over is
taken out, byte for byte, and what it keeps is left alone."""

from __future__ import annotations

import struct

import pytest
from kio.index import load_request_schema

from broker.kafka import guard
from broker.kafka.protocol import read_request


def _header(key: int, version: int, tags: bytes = b"\x00") -> bytes:
    return struct.pack(">hhih", key, version, 5, 3) + b"cli" + tags


def test_unknown_tags_go_and_known_ones_stay() -> None:
    schema = load_request_schema(1, 12)  # Fetch v12: cluster_id is tag 0
    fields = (struct.pack(">iiiib", -1, 100, 1, 1 << 20, 0) + struct.pack(">ii", 0, -1)
              + b"\x01" + b"\x01" + b"\x01")  # no topics, no forgotten topics, rack ""
    clean = _header(1, 12) + fields + b"\x01" + b"\x00\x04\x04abc"
    tagged = (_header(1, 12, b"\x02\x03\x01x\x08\x00") + fields
              + b"\x03" + b"\x05\x02yy" + b"\x00\x04\x04abc" + b"\x96\x01\x00")  # tags 5, 0, 150
    assert guard.readable(schema, tagged) == clean
    assert read_request(tagged).body.cluster_id == "abc"
    assert guard.readable(schema, clean) is clean


def test_bytes_past_the_body_are_cut() -> None:
    schema = load_request_schema(3, 1)
    clean = _header(3, 1, b"") + struct.pack(">i", -1)
    assert guard.readable(schema, clean + b"junk") == clean


def test_librdkafkas_all_topics_metadata_reads_as_kafka_reads_it() -> None:
    """Four zero bytes where the compact array count goes (a null array and three flags
    for Kafka), then librdkafka's auto-creation flag, read as a tagged-field count."""
    for allow in (0, 1):
        data = _header(3, 9) + b"\x00\x00\x00\x00" + bytes([allow]) + b"\x00\x00" + b"\x00"
        assert guard.readable(load_request_schema(3, 9), data) == (
            _header(3, 9) + b"\x00\x00\x00\x00" + b"\x00")  # no tag, nothing past the end
        assert read_request(data).body.topics is None


@pytest.mark.parametrize("tail", [
    b"\x01\x05\x7f",  # a tagged field of 127 bytes in 0
    b"\x05",  # five tagged fields, none there
    b"\x01\x00\x02\x00\x00",  # known tag 0 whose value (an empty string) leaves a byte over
])
def test_a_tagged_section_that_does_not_fit_is_refused(tail: bytes) -> None:
    fields = (struct.pack(">iiiib", -1, 100, 1, 1 << 20, 0) + struct.pack(">ii", 0, -1)
              + b"\x01" + b"\x01" + b"\x01")
    with pytest.raises(guard.Malformed):
        guard.readable(load_request_schema(1, 12), _header(1, 12) + fields + tail)


def test_a_null_where_the_schema_allows_none_is_refused() -> None:
    """Kafka refuses a null for a field that cannot be null; kio would hand the handler a
    None (the port's fuzzer found Produce and ListOffsets failing on it once bytes past the
    body no longer closed the connection)."""
    from broker.kafka.protocol import Unreadable

    produce = _header(0, 3, b"") + struct.pack(">hhii", -1, 1, 1000, -1)  # topic_data null
    authenticate = _header(36, 1, b"") + struct.pack(">i", -1)  # auth_bytes null
    for data in (produce, authenticate, produce + b"past the end"):
        with pytest.raises(Unreadable, match="schema allows none"):
            read_request(data)
    # A nullable one is taken: Metadata v1's topics (all topics).
    assert read_request(_header(3, 1, b"") + struct.pack(">i", -1)).body.topics is None
