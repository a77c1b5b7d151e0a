"""Segment blobs: frames packed and zstd-compressed, and decoded back exactly."""

from __future__ import annotations

import struct
import uuid

import pytest
import zstandard

from core import segments
from core.errors import SegmentError
from core.segments import Frame


def _frame(i: int, *, txid: str | None = None, payload: bytes | None = None,
           trace_id: uuid.UUID | None = None, producer_sub: str | None = None) -> Frame:
    return Frame(uuid.uuid4(), f"tx-{i}" if txid is None else txid,
                 b'{"i":%d}' % i if payload is None else payload, trace_id, producer_sub)


def test_pack_unpack_round_trips_every_field_in_order() -> None:
    trace = uuid.uuid4()
    frames = [
        _frame(0),
        _frame(1, trace_id=trace),
        _frame(2, producer_sub="user-42"),
        _frame(3, trace_id=trace, producer_sub="svc:é"),
        _frame(4, txid="", payload=b'"x"'),
        _frame(5, txid="ü" * 1000, payload=b"[1,2,3]"),
    ]
    out = segments.unpack(segments.pack(frames))
    assert out == frames
    assert out[1].trace_id == trace and out[1].producer_sub is None
    assert out[2].trace_id is None and out[2].producer_sub == "user-42"


def test_trace_and_producer_flags_are_set_only_when_present() -> None:
    plain = segments.encode_frame(_frame(0))
    traced = segments.encode_frame(_frame(0, trace_id=uuid.uuid4(), producer_sub="s"))
    assert plain[4] == 0
    assert traced[4] == segments.FLAG_TRACE | segments.FLAG_PRODUCER
    # The u32 prefix counts the bytes after itself.
    assert struct.unpack_from("<I", plain)[0] == len(plain) - 4


def test_empty_stored_payload_reads_back_as_json_null() -> None:
    frame = _frame(0, payload=b"")
    (out,) = segments.unpack(segments.pack([frame]))
    assert out.payload == b"null"
    assert out.transaction_id == frame.transaction_id


def test_one_mebibyte_payload_round_trips_byte_for_byte() -> None:
    payload = b'"' + bytes(range(0x41, 0x5b)) * (1024 * 1024 // 26) + b'"'
    frames = [_frame(0, payload=payload), _frame(1)]
    blob = segments.pack(frames)
    assert len(blob) < len(payload) // 10  # it did compress the repetitive text
    out = segments.unpack(blob)
    assert out[0].payload == payload
    assert out[1] == frames[1]


def test_empty_segment_unpacks_to_no_frames() -> None:
    assert segments.unpack(segments.pack([])) == []


def test_blob_that_is_not_zstd_raises_segment_error() -> None:
    with pytest.raises(SegmentError, match="does not decompress"):
        segments.unpack(b"definitely not zstd")


def test_truncated_frame_raises_segment_error() -> None:
    raw = segments.encode_frame(_frame(0))
    blob = zstandard.ZstdCompressor().compress(raw[:-3])
    with pytest.raises(SegmentError, match="past the end"):
        segments.unpack(blob)


def test_frame_too_short_for_its_header_raises_segment_error() -> None:
    blob = zstandard.ZstdCompressor().compress(b"\x05\x00\x00\x00\x00")
    with pytest.raises(SegmentError, match="malformed frame"):
        segments.unpack(blob)


def test_invalid_utf8_transaction_id_raises_segment_error() -> None:
    body = b"\x00" + uuid.uuid4().bytes + struct.pack("<H", 2) + b"\xff\xfe" + b"1"
    blob = zstandard.ZstdCompressor().compress(struct.pack("<I", len(body)) + body)
    with pytest.raises(SegmentError, match="malformed frame"):
        segments.unpack(blob)


def test_one_zstd_frame_is_told_from_anything_else() -> None:
    frames = [_frame(i) for i in range(300)]
    blob = segments.pack(frames)
    assert segments.is_one_zstd_frame(blob)
    z = zstandard.ZstdCompressor(level=1)
    assert segments.is_one_zstd_frame(z.compress(b""))
    assert segments.is_one_zstd_frame(z.compress(b"\x00" * 500_000))  # RLE blocks
    assert segments.is_one_zstd_frame(z.compress(bytes(range(256)) * 4000))  # several blocks
    checked = zstandard.ZstdCompressor(level=1, write_checksum=True).compress(b"abc" * 999)
    assert segments.is_one_zstd_frame(checked)
    assert not segments.is_one_zstd_frame(checked[:-1])
    assert not segments.is_one_zstd_frame(blob + z.compress(b"more"))  # two frames
    assert not segments.is_one_zstd_frame(blob[:-1])
    assert not segments.is_one_zstd_frame(blob + b"\x00")
    assert not segments.is_one_zstd_frame(b"")
    assert not segments.is_one_zstd_frame(b"\x28\xb5\x2f\xfd")


def test_frame_range_slices_stored_frames_without_decoding_them() -> None:
    frames = [_frame(i, payload=b"%d" % i * (i + 1)) for i in range(10)]
    raw = segments.decompress(segments.pack(frames))
    assert segments.frame_range(raw, 3, 4) == b"".join(
        segments.encode_frame(f) for f in frames[3:7])
    assert segments.frame_range(raw, 0, 10) == raw
    assert segments.frame_range(raw, 10, 0) == b""
    with pytest.raises(SegmentError):
        segments.frame_range(raw, 8, 3)


def test_the_fast_path_for_plain_frames_lays_them_out_as_encode_frame_does() -> None:
    frames = [_frame(0), _frame(1, trace_id=uuid.uuid4()), _frame(2, producer_sub="s"),
              _frame(3)]
    raw = segments.decompress(segments.pack(frames))
    assert raw == b"".join(segments.encode_frame(f) for f in frames)
    assert [f.transaction_id for f in segments.unpack_range(segments.pack(frames), 1, 2)] == [
        frames[1].transaction_id, frames[2].transaction_id]
