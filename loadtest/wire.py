"""The load generator's binary bodies and framed pops (wire-protocol §7), lean like
`loadtest.httpc`: the generator shares the cores with the broker.

Wire modes of a cell: `json` (the default), `binary` (plain binary pushes, flags 4, as the
official client's `binary_push=True`), `frames` (framed pushes, flags 8, zstd-1 frames with
client-minted UUIDv7 ids as `push_compression=True`, and framed pops as `framed_pop=True`).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator, Sequence

import zstandard

WIRES = ("json", "binary", "frames")
BINARY_TYPE = "application/x-queen-push"

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_CLAIM = struct.Struct("<QH")      # partitionId, partition name length
_SPAN = struct.Struct("<QQII")      # start, end, deliveryAttempt, record_count
_RECORD = struct.Struct("<QqIBI")   # base_offset, created_at, frame_count, codec, length
_FRAME_HEAD = struct.Struct("<IB16s")
_compressor = zstandard.ZstdCompressor(level=1, write_content_size=True)
_decompressor = zstandard.ZstdDecompressor()


def _str16(text: bytes) -> bytes:
    return _U16.pack(len(text)) + text


def push_body(wire: str, queue: bytes, partition: bytes, txids: Sequence[bytes],
              payloads: Sequence[bytes]) -> bytes:
    """One partition's push as the binary body of `wire` (`binary` or `frames`)."""
    head = _str16(queue) + _str16(partition) + _U32.pack(len(payloads))
    if wire == "binary":
        items = b"".join(_str16(t) + _U32.pack(len(p)) + p for t, p in zip(txids, payloads))
        return b"QPB1\x04" + _U32.pack(1) + head + items
    stamp = (time.time_ns() // 1_000_000).to_bytes(6, "big")
    noise = os.urandom(10 * len(payloads))
    frames = []
    for i, (txid, payload) in enumerate(zip(txids, payloads)):
        tail = bytearray(noise[10 * i:10 * i + 10])
        tail[0] = 0x70 | tail[0] & 0x0F
        tail[2] = 0x80 | tail[2] & 0x3F
        frames.append(_U32.pack(19 + len(txid) + len(payload)) + b"\x00" + stamp + tail
                      + _str16(txid) + payload)
    z = _compressor.compress(b"".join(frames))
    return b"QPB1\x08" + _U32.pack(1) + head + _U32.pack(len(z)) + z


def framed_messages(answer: bytes) -> Iterator[tuple[str, str, str, bytes]]:
    """(transactionId, partitionId, leaseId, payload) of each delivered message of a framed
    pop answer, in order."""
    view = memoryview(answer)
    if bytes(view[:4]) != b"QPF1":
        raise ValueError("not a framed pop answer")
    at = 5
    if view[4] == 1:
        at += 4 + _U32.unpack_from(view, at)[0]
    texts = []
    for _ in range(3):  # queue, leaseId, consumerGroup
        (n,) = _U16.unpack_from(view, at)
        texts.append(str(view[at + 2:at + 2 + n], "utf-8"))
        at += 2 + n
    lease = texts[1]
    (claims,) = _U32.unpack_from(view, at)
    at += 4
    for _ in range(claims):
        pid, n = _CLAIM.unpack_from(view, at)
        at += _CLAIM.size + n
        start, end, _attempt, records = _SPAN.unpack_from(view, at)
        at += _SPAN.size
        partition_id = str(pid)
        for _ in range(records):
            base, _created, count, codec, size = _RECORD.unpack_from(view, at)
            at += _RECORD.size
            raw = view[at:at + size]
            at += size
            frames = memoryview(_decompressor.decompressobj().decompress(raw)) \
                if codec == 1 else raw
            pos = 0
            for i in range(count):
                length, flags, _mid = _FRAME_HEAD.unpack_from(frames, pos)
                stop = pos + 4 + length
                pos += _FRAME_HEAD.size + (16 if flags & 1 else 0)
                (n,) = _U16.unpack_from(frames, pos)
                txid = str(frames[pos + 2:pos + 2 + n], "utf-8")
                pos += 2 + n
                if flags & 2:
                    (n,) = _U16.unpack_from(frames, pos)
                    pos += 2 + n
                if start <= base + i <= end:
                    yield txid, partition_id, lease, bytes(frames[pos:stop])
                pos = stop
