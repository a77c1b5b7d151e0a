"""Raw Kafka requests for tests that must send exact bytes (resends, hostile input)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import crc32c
from kio.index import load_response_schema
from kio.serial import entity_reader

from broker.kafka.records import OutRecord, encode_batch


def request(key: int, version: int, body: bytes, *, correlation: int = 7,
            flexible: bool = False) -> bytes:
    header = struct.pack(">hhih", key, version, correlation, 4) + b"test"
    if flexible:
        header += b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def batch(values: list[bytes], *, producer_id: int = -1, epoch: int = -1,
          sequence: int = -1) -> bytes:
    """A producer's uncompressed batch of `values`, stamped with its producer fields."""
    plain = encode_batch([OutRecord(i, 1_700_000_000_000 + i, None, v)
                          for i, v in enumerate(values)])
    fields = list(struct.unpack(">hiqqqhii", plain[21:61]))
    fields[4], fields[5], fields[6] = producer_id, epoch, sequence
    tail = struct.pack(">hiqqqhii", *fields) + plain[61:]
    return struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, crc32c.crc32c(tail)) + tail


def produce_v3(topic: str, records: bytes, *, partition: int = 0, acks: int = -1) -> bytes:
    body = (struct.pack(">h", -1) + struct.pack(">hi", acks, 5000) + struct.pack(">i", 1)
            + struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", 1)
            + struct.pack(">i", partition) + struct.pack(">i", len(records)) + records)
    return request(0, 3, body)


def produce_answer(answer: bytes, topic: str) -> tuple[int, int]:
    """(error code, base offset) of a one-partition Produce v3 answer (with its length)."""
    at = 4 + 4 + 4 + 2 + len(topic) + 4 + 4
    code, base = struct.unpack_from(">hq", answer, at)
    return code, base


async def exchange(port: int, data: bytes, *, timeout: float = 5) -> bytes:
    """Send bytes; answer everything read until the listener closes (or `timeout`, after
    which `<open>` is appended)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        out = b""
        try:
            async with asyncio.timeout(timeout):
                while chunk := await reader.read(65536):
                    out += chunk
        except TimeoutError:
            out += b"<open>"
        return out
    finally:
        writer.close()


async def one_answer(port: int, data: bytes) -> bytes:
    """Send one request and read its one answer (length included)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(10):
            head = await reader.readexactly(4)
            return head + await reader.readexactly(struct.unpack(">i", head)[0])
    finally:
        writer.close()


def answers(data: bytes) -> list[bytes]:
    """The answer frames, each without its length, in the bytes read from a connection (a
    trailing `<open>` of `exchange` is left out)."""
    out = []
    at = 0
    while at + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, at)
        if at + 4 + size > len(data):
            break
        out.append(data[at + 4:at + 4 + size])
        at += 4 + size
    return out


def decode(key: int, version: int, answer: bytes) -> tuple[int, Any]:
    """(correlation id, kio response object) of one answer frame without its length."""
    schema = load_response_schema(key, version)
    (correlation,) = struct.unpack_from(">i", answer)
    at = 4
    if schema.__flexible__ and key != 18:  # response header v1 (ApiVersions keeps v0)
        assert answer[at] == 0, "tagged fields in a response header"
        at += 1
    body, size = entity_reader(schema)(answer, at)
    assert at + size == len(answer), "bytes past the answer's body"
    return correlation, body


def fetch_v4(topic: str, partitions: list[int], *, max_bytes: int, partition_max_bytes: int,
             offset: int = 0, max_wait_ms: int = 0, min_bytes: int = 0) -> bytes:
    """A Fetch v4 of `partitions` of `topic` from `offset`, with these byte limits."""
    body = (struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 0)
            + struct.pack(">i", 1) + struct.pack(">h", len(topic)) + topic.encode()
            + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">iqi", p, offset, partition_max_bytes)
                       for p in partitions))
    return request(1, 4, body)
