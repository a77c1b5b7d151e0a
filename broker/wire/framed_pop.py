"""The framed pop answer (wire-protocol §7.4), sent for `frames=true`:

    "QPF1" | u8 version | [version 1: blob32 JSON object of extra keys]
    | str16 queue | str16 leaseId | str16 consumerGroup | u32 claim_count | claims
    claim:  u64 partitionId | str16 partition | u64 start | u64 end (inclusive)
            | u32 deliveryAttempt | u32 record_count | records
    record: u64 base_offset | i64 created_at (µs since the epoch) | u32 frame_count
            | u8 codec (0 raw, 1 zstd) | blob32 frames

A record is a run of storage frames (§7.1); frame i has offset base_offset + i, and the
client keeps those within the claim's start..end. The official client decodes a zstd
record with one `decompressobj().decompress` call, so a codec-1 record must be exactly one
zstd frame, and it refuses frames marked encrypted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from broker.wire.binary import BinaryWriter
from core import segments
from core.types import Claim

MAGIC = b"QPF1"
CODEC_RAW = 0
CODEC_ZSTD = 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(slots=True)
class FramedRecord:
    base_offset: int
    created_at: datetime
    frame_count: int
    codec: int
    data: bytes


@dataclass(slots=True)
class FramedClaim:
    partition_id: int
    partition: str
    start: int
    end: int
    delivery_attempt: int = 1
    records: list[FramedRecord] = field(default_factory=list)


def encode(*, queue: str, lease_id: str, group: str, claims: Sequence[FramedClaim],
           extras: dict[str, Any] | None = None) -> bytes:
    """The answer's bytes; `extras` (e.g. the autopilot echo) make it version 1."""
    out = BinaryWriter(MAGIC)
    if extras:
        out.u8(1)
        out.blob32(msgspec.json.encode(extras))
    else:
        out.u8(0)
    out.text16(queue)
    out.text16(lease_id)
    out.text16(group)
    out.u32(len(claims))
    for claim in claims:
        out.u64(claim.partition_id)
        out.text16(claim.partition)
        out.u64(claim.start)
        out.u64(claim.end)
        out.u32(claim.delivery_attempt)
        out.u32(len(claim.records))
        for record in claim.records:
            out.u64(record.base_offset)
            out.i64((record.created_at - _EPOCH) // _MICROSECOND)
            out.u32(record.frame_count)
            out.u8(record.codec)
            out.blob32(record.data)
    return out.bytes()


def stored_claims(claims: Sequence[Claim]) -> list[FramedClaim]:
    """A pop's claims with their stored segments, sent as stored where that serves.

    A segment goes out as it is stored (codec 1) when it is one whole zstd frame and at
    least half of its messages are delivered: nothing is decompressed or re-encoded, and the
    client skips the frames outside the span. Otherwise only the delivered frames go out,
    decompressed but not decoded (codec 0), so a pop of 1 message from a 5000-message
    segment does not ship the whole segment."""
    return [FramedClaim(c.partition_id, c.partition, c.start, c.end, c.retry_count + 1,
                        _records(c)) for c in claims]


def _records(claim: Claim) -> list[FramedRecord]:
    records = []
    for seg in claim.segments:
        count = seg.last_offset - seg.base_offset + 1
        first = max(claim.start, seg.base_offset)
        delivered = min(claim.end, seg.last_offset) - first + 1
        if delivered <= 0:
            continue
        if 2 * delivered >= count and segments.is_one_zstd_frame(seg.blob):
            records.append(FramedRecord(seg.base_offset, seg.created_at, count, CODEC_ZSTD,
                                        seg.blob))
        else:
            records.append(FramedRecord(first, seg.created_at, delivered, CODEC_RAW,
                                        segments.frame_range(segments.decompress(seg.blob),
                                                             first - seg.base_offset, delivered)))
    return records
