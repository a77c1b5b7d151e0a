"""The framed pop answer (wire-protocol §7.4), read back with the official client's decoder
(`queen.http.pop_frames`), and checked byte by byte against the layout."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from typing import Any

import zstandard
from queen.http.pop_frames import decode_pop_frames

from broker.wire import framed_pop
from broker.wire.framed_pop import FramedClaim, FramedRecord
from core import segments
from core.engine.pop import Claim, StoredSegment
from core.ids import PartitionId, QueueId, uuid7
from core.segments import Frame

T0 = datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=UTC)
T1 = datetime(2026, 12, 2, 12, 0, 1, tzinfo=UTC)


def stored(base: int, at: datetime, frames: list[Frame]) -> StoredSegment:
    return StoredSegment(base, at, segments.pack(frames), base + len(frames) - 1)


def claim(pid: int, start: int, end: int, *stored_segments: StoredSegment,
          retries: int = 0) -> Claim:
    return Claim(QueueId(1), "q", PartitionId(pid), f"P{pid}", start, end, retries,
                       list(stored_segments))


def frames(n: int, tag: str = "t") -> list[Frame]:
    return [Frame(uuid7(), f"{tag}{i}", b'{"i":%d}' % i) for i in range(n)]


def read(claims: list[Claim]) -> list[tuple[str, str, Any, int, int]]:
    body = framed_pop.encode(queue="q", lease_id="L", group="g",
                             claims=framed_pop.stored_claims(claims))
    return [(m["partitionId"], m["transactionId"], m["data"], m["offset"],
             m["deliveryAttempt"]) for m in decode_pop_frames(body)["messages"]]


def test_stored_segments_go_out_as_stored_when_most_of_them_is_delivered() -> None:
    a, b = frames(10, "a"), frames(4, "b")
    c = claim(7, 3, 13, stored(0, T0, a), stored(10, T1, b), retries=2)
    [out] = framed_pop.stored_claims([c])
    # Segment a: 7 of 10 delivered, segment b: 4 of 4 -> the stored blobs.
    assert [(r.base_offset, r.frame_count, r.codec, r.data) for r in out.records] == [
        (0, 10, 1, c.segments[0].blob), (10, 4, 1, c.segments[1].blob)]
    assert (out.start, out.end, out.delivery_attempt) == (3, 13, 3)
    assert read([c]) == [("7", f"a{i}", {"i": i}, i, 3) for i in range(3, 10)] + [
        ("7", f"b{i}", {"i": i}, 10 + i, 3) for i in range(4)]


def test_a_small_share_of_a_segment_goes_out_as_its_delivered_frames_only() -> None:
    a = frames(100, "a")
    c = claim(9, 40, 41, stored(0, T0, a))
    [out] = framed_pop.stored_claims([c])
    assert [(r.base_offset, r.frame_count, r.codec) for r in out.records] == [(40, 2, 0)]
    assert out.records[0].data == b"".join(segments.encode_frame(f) for f in a[40:42])
    assert read([c]) == [("9", "a40", {"i": 40}, 40, 1), ("9", "a41", {"i": 41}, 41, 1)]


def test_a_blob_that_is_not_one_zstd_frame_goes_out_decoded() -> None:
    a = frames(6, "a")
    raw = b"".join(segments.encode_frame(f) for f in a)
    z = zstandard.ZstdCompressor(level=1, write_content_size=True)
    two = z.compress(raw[:50]) + z.compress(raw[50:])  # split inside a storage frame
    assert not segments.is_one_zstd_frame(two) and segments.decompress(two) == raw
    # The client reads one zstd frame per record: these frames go out decompressed.
    [out] = framed_pop.stored_claims([claim(3, 0, 5, StoredSegment(0, T0, two, 5))])
    assert [(r.codec, r.frame_count, r.data) for r in out.records] == [(0, 6, raw)]
    assert [m[1] for m in read([claim(3, 0, 5, StoredSegment(0, T0, two, 5))])] == [
        f"a{i}" for i in range(6)]


def test_layout_byte_by_byte_with_extras_and_a_stored_zstd_record() -> None:
    frames = [Frame(uuid7(), f"t{i}", b"%d" % i) for i in range(4)]
    blob = segments.pack(frames)
    claim = FramedClaim(2**40 + 3, "eu", 11, 12, 3,
                        [FramedRecord(10, T0, 4, framed_pop.CODEC_ZSTD, blob)])
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
