"""The framed pop answer (wire-protocol §7.4), read back with the official client's decoder
(`queen.http.pop_frames`), and checked byte by byte against the layout."""

from __future__ import annotations

import struct
import uuid
from datetime import UTC, datetime

import zstandard
from queen.http.pop_frames import decode_pop_frames

from broker.wire import framed_pop
from broker.wire.framed_pop import Claim, Record
from core import segments
from core.ids import PartitionId, uuid7
from core.pop import Delivered
from core.segments import Frame

T0 = datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=UTC)
T1 = datetime(2026, 12, 2, 12, 0, 1, tzinfo=UTC)


def delivered(pid: int, offset: int, at: datetime, payload: bytes, **extra: object) -> Delivered:
    frame = Frame(uuid7(), f"tx-{pid}-{offset}", payload)
    for key, value in extra.items():
        setattr(frame, key, value)
    return Delivered("q", f"P{pid}", PartitionId(pid), offset, at, frame)


def test_decoded_messages_from_delivered_ones_read_like_the_json_answer() -> None:
    trace = uuid.uuid4()
    messages = [delivered(7, 5, T0, b'{"a":1}', trace_id=trace),
                delivered(7, 6, T0, b"null", producer_sub="alice"),
                delivered(7, 7, T1, '"ü"'.encode()),  # another segment: another record
                delivered(9, 0, T1, b"[1,2]")]
    claims = framed_pop.claims_from_delivered(messages)
    assert [(c.partition_id, c.partition, c.start, c.end, len(c.records)) for c in claims] == [
        (7, "P7", 5, 7, 2), (9, "P9", 0, 0, 1)]
    assert [(r.base_offset, r.frame_count, r.codec) for r in claims[0].records] == [
        (5, 2, 0), (7, 1, 0)]
    body = framed_pop.encode(queue="q", lease_id="L1", group="g", claims=claims)
    answer = decode_pop_frames(body)
    assert (answer["queue"], answer["leaseId"], answer["consumerGroup"]) == ("q", "L1", "g")
    assert (answer["partition"], answer["partitionId"], answer["partitionsClaimed"]) == (
        "P7", "7", 2)
    got = [(m["id"], m["transactionId"], m["traceId"], m["data"], m["producerSub"],
            m["partitionId"], m["partition"], m["offset"], m["createdAt"])
           for m in answer["messages"]]
    assert got == [
        (str(messages[0].frame.message_id), "tx-7-5", str(trace), {"a": 1}, None, "7", "P7", 5,
         "2026-12-02T12:00:00.123Z"),
        (str(messages[1].frame.message_id), "tx-7-6", None, None, "alice", "7", "P7", 6,
         "2026-12-02T12:00:00.123Z"),
        (str(messages[2].frame.message_id), "tx-7-7", None, "ü", None, "7", "P7", 7,
         "2026-12-02T12:00:01.000Z"),
        (str(messages[3].frame.message_id), "tx-9-0", None, [1, 2], None, "9", "P9", 0,
         "2026-12-02T12:00:01.000Z")]
    assert {m["leaseId"] for m in answer["messages"]} == {"L1"}


def test_layout_byte_by_byte_with_extras_and_a_stored_zstd_record() -> None:
    frames = [Frame(uuid7(), f"t{i}", b"%d" % i) for i in range(4)]
    blob = segments.pack(frames)
    claim = Claim(2**40 + 3, "eu", 11, 12, 3, [Record(10, T0, 4, framed_pop.CODEC_ZSTD, blob)])
    body = framed_pop.encode(queue="", lease_id="", group="__QUEUE_MODE__", claims=[claim],
                             extras={"autopilot": {"partitions": 1, "batch": 2, "waitMs": 100}})
    extras = b'{"autopilot":{"partitions":1,"batch":2,"waitMs":100}}'
    micros = int((T0 - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1_000_000)
    expected = (b"QPF1\x01" + struct.pack("<I", len(extras)) + extras
                + b"\x00\x00" + b"\x00\x00" + b"\x0e\x00__QUEUE_MODE__" + struct.pack("<I", 1)
                + struct.pack("<Q", 2**40 + 3) + b"\x02\x00eu" + struct.pack("<QQII", 11, 12, 3, 1)
                + struct.pack("<QqIB", 10, micros, 4, 1) + struct.pack("<I", len(blob)) + blob)
    assert body == expected
    answer = decode_pop_frames(body)
    # Only offsets 11..12 of the record 10..13 are delivered.
    assert [(m["offset"], m["data"], m["deliveryAttempt"]) for m in answer["messages"]] == [
        (11, 1, 3), (12, 2, 3)]
    assert answer["autopilot"] == {"partitions": 1, "batch": 2, "waitMs": 100}
    assert answer["partitionId"] == str(2**40 + 3)


def test_a_segment_blob_is_one_zstd_frame_the_client_can_read_whole() -> None:
    frames = [Frame(uuid7(), f"t{i}", b"%d" % i) for i in range(100)]
    blob = segments.pack(frames)
    obj = zstandard.ZstdDecompressor().decompressobj()
    assert obj.decompress(blob) == b"".join(segments.encode_frame(f) for f in frames)
    assert obj.eof and obj.unused_data == b""
