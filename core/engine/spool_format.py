"""The on-disk format of a push spool file: a header, then length-prefixed, checksummed records.

    header  "QSPOOL2\n" | u64 end | u64 drained | u64 records | u64 flags   (little-endian)
    record  u32 body length | u32 crc32(length bytes + body) | body

`end` is where the records confirmed by their writer end (written after their fsync, so
everything before it is on disk); `drained` is where the first record not yet written to
the database starts; `records` counts the records up to `end`; `flags` says whether the
file is sealed (takes no more records) or damaged. Each field is written on its own (a
writer writes `end`, `records` and `flags`; the drainer only `drained`), so neither ever
overwrites the other's.

The body is a msgpack array: message id (16 bytes), transactionId, queue, partition, payload
(the JSON bytes as received), trace id (16 bytes or nil), producerSub (text or nil), and the
queue's tenant, left out for the default tenant (so a file written before tenants existed
reads as the default tenant's, and the default tenant's records are what they were). When the
process has an encryption key (`QUEEN_ENCRYPTION_KEY`), every payload is sealed with it
(AES-256-GCM, bound to its queue and partition, as segments are): the spool is written before
the queue's options can be read (the database may be down), so it never holds a payload in
plain text that an encrypted queue would not store in plain text. The
message id and transactionId are those minted when the push was answered `buffered`, so a
record replayed twice (after a crash between its commit and the header update) is a
duplicate in the database, not a second message.

A record is valid only when its length is positive, its bytes are all there and its
checksum matches. Reading stops at the first invalid record: when nothing valid can follow
it (it reaches the end of the file, or only zeros do), it is a torn write that was never
acknowledged (acknowledgement waits for the fsync of the whole record) and is dropped; when
data follows it, the file is damaged and the reader says so instead of guessing where the
next record starts.
"""

from __future__ import annotations

import enum
import os
import struct
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec

from core.engine import encryption

MAGIC = b"QSPOOL2\n"
HEADER = struct.Struct("<8sQQQQ")
HEADER_SIZE = HEADER.size
_FIELD = struct.Struct("<Q")
END_AT, DRAINED_AT, RECORDS_AT, FLAGS_AT = 8, 16, 24, 32
SEALED, DAMAGED = 1, 2  # flags
_RECORD_HEAD = struct.Struct("<II")
_LENGTH = struct.Struct("<I")
# A record body is one message and its names: larger than the body limit of any push.
MAX_BODY = 1 << 30


@dataclass(slots=True)
class SpoolRecord:
    """One buffered message, as the push route minted it."""

    message_id: uuid.UUID
    transaction_id: str
    queue: str
    partition: str
    payload: bytes
    trace_id: uuid.UUID | None = None
    producer_sub: str | None = None
    tenant: str = ""  # the queue's tenant (core/tenancy)


class _Body(msgspec.Struct, array_like=True):
    """A record body as read: seven fields, or eight with a tenant."""

    message_id: bytes
    transaction_id: str
    queue: str
    partition: str
    payload: bytes
    trace_id: bytes | None
    producer_sub: str | None
    tenant: str = ""


_decoder = msgspec.msgpack.Decoder(_Body)


def encode_record(record: SpoolRecord) -> bytes:
    # str(): the edge's names are str subclasses, which msgpack does not take as they are
    queue, partition, payload = str(record.queue), str(record.partition), bytes(record.payload)
    if encryption.cipher() is not None:
        payload = encryption.seal(payload, queue, partition)
    fields: tuple[object, ...] = (
        record.message_id.bytes, str(record.transaction_id), queue, partition, payload,
        record.trace_id.bytes if record.trace_id else None,
        None if record.producer_sub is None else str(record.producer_sub))
    if record.tenant:
        fields += (str(record.tenant),)
    body = msgspec.msgpack.encode(fields)
    length = _LENGTH.pack(len(body))
    return _RECORD_HEAD.pack(len(body), zlib.crc32(body, zlib.crc32(length))) + body


def decode_body(body: bytes) -> SpoolRecord:
    b = _decoder.decode(body)
    # A sealed payload is opened (EncryptionError without the key, never garbage); a JSON
    # payload never starts with the seal's magic bytes.
    payload = encryption.opened(b.payload, b.queue, b.partition)
    return SpoolRecord(uuid.UUID(bytes=b.message_id), b.transaction_id, b.queue, b.partition,
                       payload, uuid.UUID(bytes=b.trace_id) if b.trace_id is not None else None,
                       b.producer_sub, b.tenant)


@dataclass(slots=True)
class Header:
    end: int
    drained: int
    records: int
    flags: int

    @property
    def sealed(self) -> bool:
        return bool(self.flags & SEALED)


def encode_header(header: Header) -> bytes:
    return HEADER.pack(MAGIC, header.end, header.drained, header.records, header.flags)


def write_field(fd: int, at: int, value: int) -> None:
    os.pwrite(fd, _FIELD.pack(value), at)


class Ending(enum.Enum):
    """How reading a file ended."""

    CLEAN = "clean"  # every byte belonged to a valid record
    TORN = "torn"  # the last record is incomplete or fails its checksum: dropped
    DAMAGED = "damaged"  # an invalid record with more data after it (or a bad header)


@dataclass(slots=True)
class ReadState:
    """Where a reader stopped: `offset` is the end of the last valid record."""

    offset: int
    ending: Ending = Ending.CLEAN


def read_header(fd: int) -> Header | None:
    """The header, or None when the file does not start with a sound one."""
    raw = os.pread(fd, HEADER_SIZE, 0)
    if len(raw) < HEADER_SIZE:
        return None
    magic, end, drained, records, flags = HEADER.unpack(raw)
    if magic != MAGIC or not HEADER_SIZE <= drained <= end:
        return None
    return Header(end, drained, records, flags)


def scan(fd: int, start: int, end: int, state: ReadState, *, decode: bool = True
         ) -> Iterator[tuple[SpoolRecord | None, int]]:
    """The valid records between `start` and `end` (a byte offset, normally the file size),
    each with the offset just past it; `state` tells where and how reading stopped. With
    `decode` false, records are counted without being decoded (or checksummed)."""
    offset = start
    state.offset, state.ending = start, Ending.CLEAN
    while offset < end:
        head = os.pread(fd, _RECORD_HEAD.size, offset)
        if len(head) < _RECORD_HEAD.size:
            state.ending = Ending.TORN
            return
        length, crc = _RECORD_HEAD.unpack(head)
        stop = offset + _RECORD_HEAD.size + length
        if length == 0 or length > MAX_BODY or stop > end:
            state.ending = (Ending.TORN if 0 < length <= MAX_BODY
                            else _torn_or_damaged(fd, offset, stop, end))
            return
        record: SpoolRecord | None = None
        if decode:
            body = os.pread(fd, length, offset + _RECORD_HEAD.size)
            if len(body) < length or zlib.crc32(body, zlib.crc32(head[:4])) != crc:
                state.ending = _torn_or_damaged(fd, offset, stop, end)
                return
            try:
                record = decode_body(body)
            except (msgspec.DecodeError, ValueError):
                state.ending = Ending.DAMAGED  # a valid checksum over a bad body: not torn
                return
        offset = stop
        state.offset = offset
        yield record, offset


def _torn_or_damaged(fd: int, offset: int, stop: int, end: int) -> Ending:
    """An invalid record at `offset` is torn when nothing valid can follow it: it reaches
    the end of the file, or the rest of the file is zeros (a file extended by a crash
    before its data reached the disk)."""
    if stop >= end:
        return Ending.TORN
    while offset < end:
        chunk = os.pread(fd, min(1 << 20, end - offset), offset)
        if not chunk or chunk.count(0) != len(chunk):
            return Ending.DAMAGED
        offset += len(chunk)
    return Ending.TORN
