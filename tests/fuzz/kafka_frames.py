"""A fuzzer of the Kafka port: random frames, and mutations of valid requests of every API
the listener serves (truncated, extended, bytes flipped, lengths and versions changed).

Each case goes on its own connection; the listener must answer it, or close the
connection, and stay up; at the end a real client must still produce and consume, and the
listener's log must hold no unexpected error (an exception a handler did not expect is
logged with its traceback: that is a bug the fuzzer found).

    python -m tests.fuzz.kafka_frames --port 9092 --seconds 300 [--seed N]
runs it against a listener of your own (tests/fuzz/test_kafka_fuzz.py runs it CI-sized).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import random
import struct
import time
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema
from kio.serial import entity_writer

from broker.kafka import protocol
from tests.kafka.wire import batch


def _encoded(key: int, version: int, values: dict[str, Any]) -> bytes:
    schema = load_request_schema(key, version)
    body = io.BytesIO()
    entity_writer(schema)(body, protocol.build(schema, values))
    header = struct.pack(">hhih", key, version, 99, 4) + b"fuzz"
    if schema.__flexible__:
        header += b"\x00"
    return header + body.getvalue()


def seeds(topic: str) -> list[bytes]:
    """Valid request payloads (without the frame length) of the APIs served; never
    DeleteTopics or DeleteGroups, so a run cannot delete what others use."""
    records = batch([b'{"a": 1}', b"text", b"\xff"])
    idempotent = batch([b"x"], producer_id=7, epoch=0, sequence=0)
    group = f"fuzz-group-{topic}"
    out = []
    for version in (0, 3):
        out.append(_encoded(protocol.API_VERSIONS, version, {
            "client_software_name": "fuzz", "client_software_version": "1"}))
    for version in (1, 4, 9):
        out.append(_encoded(protocol.METADATA, version, {
            "topics": [{"name": topic}], "allow_auto_topic_creation": True}))
    for version in (3, 9):
        for records_of in (records, idempotent):
            out.append(_encoded(protocol.PRODUCE, version, {
                "acks": -1, "timeout": 1000, "topic_data": [{"name": topic, "partition_data": [
                    {"index": 0, "records": records_of}]}]}))
    for version in (4, 12):
        out.append(_encoded(protocol.FETCH, version, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}))
    out.append(_encoded(protocol.LIST_OFFSETS, 6, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -2}]}]}))
    out.append(_encoded(protocol.INIT_PRODUCER_ID, 4, {
        "transaction_timeout": 1000, "producer_id": -1, "producer_epoch": -1}))
    out.append(_encoded(protocol.FIND_COORDINATOR, 3, {"key": group, "key_type": 0}))
    for version in (0, 5):
        out.append(_encoded(protocol.JOIN_GROUP, version, {
            "group_id": group, "session_timeout": 6000, "rebalance_timeout": 1000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x01"}]}))
    out.append(_encoded(protocol.SYNC_GROUP, 3, {
        "group_id": group, "generation_id": 1, "member_id": "m", "assignments": []}))
    out.append(_encoded(protocol.HEARTBEAT, 3, {
        "group_id": group, "generation_id": 1, "member_id": "m"}))
    out.append(_encoded(protocol.LEAVE_GROUP, 3, {
        "group_id": group, "members": [{"member_id": "m"}]}))
    out.append(_encoded(protocol.OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 1}]}]}))
    out.append(_encoded(protocol.OFFSET_FETCH, 7, {
        "group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}))
    out.append(_encoded(protocol.DESCRIBE_GROUPS, 4, {"groups": [group]}))
    out.append(_encoded(protocol.LIST_GROUPS, 4, {"states_filter": []}))
    out.append(_encoded(protocol.CREATE_TOPICS, 5, {
        "timeout": 1000, "topics": [{"name": f"{topic}-c", "num_partitions": 2,
                                     "replication_factor": 1}]}))
    for version in (0, 1):
        out.append(_encoded(protocol.SASL_HANDSHAKE, version, {"mechanism": "PLAIN"}))
        out.append(_encoded(protocol.CONSUMER_GROUP_HEARTBEAT, version, {
            "group_id": group, "member_id": "m", "member_epoch": 0, "rebalance_timeout": 1000,
            "subscribed_topic_names": [topic]}))
    # librdkafka's flexible Metadata for all topics (three bytes of its array-count slot
    # left in the body), and a header and body carrying tagged fields no schema knows.
    metadata_v9 = struct.pack(">hhih", protocol.METADATA, 9, 99, 4) + b"fuzz"
    out.append(metadata_v9 + b"\x00" + b"\x00\x00\x00\x00\x01\x00\x00\x00")
    out.append(metadata_v9 + b"\x01\x07\x02ab" + b"\x02" + bytes([len(topic) + 1]) + topic.encode()
               + b"\x01\x05\x01z" + b"\x01\x00\x00\x01\x09\x00")
    return out


def mutate(data: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(7)
    buf = bytearray(data)
    if kind == 0 and buf:  # flip bytes
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
    elif kind == 1:  # truncate
        del buf[rng.randrange(len(buf) + 1):]
    elif kind == 2:  # extend with junk
        buf += rng.randbytes(rng.randint(1, 64))
    elif kind == 3 and len(buf) > 8:  # a big or negative 32-bit number somewhere
        at = rng.randrange(len(buf) - 4)
        buf[at:at + 4] = struct.pack(">i", rng.choice([-1, -2**31, 2**31 - 1, 1 << 24]))
    elif kind == 4 and len(buf) >= 4:  # another version of the same key
        buf[2:4] = struct.pack(">h", rng.randint(-1, 20))
    elif kind == 5 and len(buf) >= 2:  # another key
        buf[0:2] = struct.pack(">h", rng.choice([0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15,
                                                 16, 17, 18, 19, 22, 36, 42, 68, 99, -1]))
    else:  # splice two halves of the same request
        cut = rng.randrange(len(buf) + 1)
        buf = buf[cut:] + buf[:cut]
    return bytes(buf)


@dataclass
class Tally:
    cases: int = 0
    answered: int = 0
    closed: int = 0
    left_open: int = 0


async def _one(port: int, payload: bytes, *, frame_length: int | None, tally: Tally) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        length = len(payload) if frame_length is None else frame_length
        writer.write(struct.pack(">i", length) + payload)
        await writer.drain()
        try:
            async with asyncio.timeout(0.5):
                data = await reader.read(65536)
            if data:
                tally.answered += 1
            else:
                tally.closed += 1
        except TimeoutError:
            tally.left_open += 1  # a long poll, a join waiting for its group, or a short frame
    except ConnectionError:
        tally.closed += 1
    finally:
        writer.close()
        tally.cases += 1


async def fuzz(port: int, *, seconds: float, seed: int, topic: str) -> Tally:
    rng = random.Random(seed)
    valid = seeds(topic)
    tally = Tally()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        choice = rng.random()
        frame_length = None
        if choice < 0.15:
            payload = rng.randbytes(rng.randint(0, 200))
        elif choice < 0.2:
            payload = rng.choice(valid)
        else:
            payload = rng.choice(valid)
            for _ in range(rng.randint(1, 3)):
                payload = mutate(payload, rng)
        if rng.random() < 0.05:  # a frame length that lies
            frame_length = rng.choice([-1, 0, len(payload) + 10, 2**31 - 1])
        await _one(port, payload, frame_length=frame_length, tally=tally)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.kafka_frames")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    tally = asyncio.run(fuzz(args.port, seconds=args.seconds, seed=args.seed,
                             topic=f"fuzz-{args.seed}"))
    print(f"seed {args.seed}: {tally}")


if __name__ == "__main__":
    main()
