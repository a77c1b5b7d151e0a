"""Binary bodies and framed pops over HTTP against the real broker (wire-protocol §7).

Bodies come from the official client's encoders; the broker's answers are read with its
decoder. What the official client does end to end in these modes is covered by the
official-client tests, which run in every mode; here: what the client never sends (bad
bytes, counts, flags it does not set), what is stored, and what the answers are byte for
byte.
"""

from __future__ import annotations

import json
import struct
import uuid
from typing import Any

import asyncpg
import httpx
import pytest
import zstandard
from queen.http.pop_frames import decode_pop_frames
from queen.http.push_binary import (
    PushBatch,
    encode_push_binary,
    encode_push_frames,
    encode_transaction_frames,
)

from core import segments
from tests.support import fetch_records, pop_json, push_items, queue_counts

BINARY = {"Content-Type": "application/x-queen-push"}


async def post_binary(http: httpx.AsyncClient, path: str, body: bytes,
                      content_type: str = "application/x-queen-push") -> httpx.Response:
    return await http.post(path, content=body, headers={"Content-Type": content_type})


async def segment_blobs(db: asyncpg.Connection, queue: str, partition: str = "Default"
                        ) -> list[bytes]:
    rows = await db.fetch(
        """SELECT s.blob FROM queen.log_segments s
             JOIN queen.log_partitions p ON p.id = s.partition_id
             JOIN queen.queues q ON q.id = p.queue_id
            WHERE q.name = $1 AND p.name = $2 ORDER BY s.base_offset""", queue, partition)
    return [bytes(r["blob"]) for r in rows]


def z_of(body: bytes, group: int = 0) -> bytes:
    """The zstd frame of a framed push body's group (walks the layout of §7.2)."""
    at = 9
    for index in range(group + 1):
        for _ in range(2):
            (n,) = struct.unpack_from("<H", body, at)
            at += 2 + n
        at += 4
        (size,) = struct.unpack_from("<I", body, at)
        if index == group:
            return body[at + 4:at + 4 + size]
        at += 4 + size
    raise AssertionError("unreachable")


async def test_plain_binary_push_answers_the_json_array_and_stores_like_json(
        http: httpx.AsyncClient, queue_name: str) -> None:
    body = encode_push_binary([PushBatch(queue_name, "eu", [b'{"n":1}', b"[2]"], ["a", ""]),
                               PushBatch(queue_name, "", [b"null"], ["c"])])
    r = await post_binary(http, "/api/v1/push", body)
    assert r.status_code == 201, r.text
    answer = r.json()
    assert [(e["index"], e["transaction_id"], e["status"], e["queueName"]) for e in answer] == [
        (0, "a", "queued", queue_name), (1, answer[1]["message_id"], "queued", queue_name),
        (2, "c", "queued", queue_name)]
    assert uuid.UUID(answer[1]["message_id"]).version == 7
    eu = await fetch_records(http, queue_name, "eu")
    assert [(r["transactionId"], r["payload"]) for r in eu["records"]] == [
        ("a", {"n": 1}), (answer[1]["message_id"], [2])]
    default = await fetch_records(http, queue_name)
    assert [r["payload"] for r in default["records"]] == [None]


async def test_framed_push_is_stored_as_the_clients_zstd_frame(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    body = encode_push_frames([PushBatch(queue_name, "Default", [b'{"i":%d}' % i
                                                                 for i in range(50)],
                                         [f"t{i}" for i in range(50)])])
    r = await post_binary(http, "/api/v1/push", body)
    assert r.status_code == 201, r.text
    assert [e["status"] for e in r.json()] == ["queued"] * 50
    assert await segment_blobs(db, queue_name) == [z_of(body)]  # byte for byte
    ids = [e["message_id"] for e in r.json()]
    frames = segments.unpack(z_of(body))
    assert [str(f.message_id) for f in frames] == ids  # the client's ids, answered back


async def test_framed_push_meeting_a_stored_duplicate_is_rebuilt_without_it(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    first = await http.post("/api/v1/push", json={"items": [
        {"queue": queue_name, "payload": "old", "transactionId": "t1"}]})
    stored_id = first.json()[0]["message_id"]
    body = encode_push_frames([PushBatch(queue_name, "Default", [b'"a"', b'"b"', b'"c"'],
                                         ["t0", "t1", "t2"])])
    r = await post_binary(http, "/api/v1/push", body)
    assert [(e["status"], e["transaction_id"]) for e in r.json()] == [
        ("queued", "t0"), ("duplicate", "t1"), ("queued", "t2")]
    assert r.json()[1]["message_id"] == stored_id
    blobs = await segment_blobs(db, queue_name)
    assert len(blobs) == 2 and blobs[1] != z_of(body)
    records = (await fetch_records(http, queue_name))["records"]
    assert [(r["offset"], r["transactionId"], r["payload"]) for r in records] == [
        (0, "t1", "old"), (1, "t0", "a"), (2, "t2", "c")]
    # Sent again (the client's retry: the same bytes), everything is a duplicate.
    again = await post_binary(http, "/api/v1/push", body)
    assert [e["status"] for e in again.json()] == ["duplicate"] * 3
    assert [e["message_id"] for e in again.json()] == [e["message_id"] for e in r.json()]


async def test_counts_answers_for_push_and_transaction(
        http: httpx.AsyncClient, queue_name: str) -> None:
    body = encode_push_binary([PushBatch(queue_name, "p", [b"1", b"2"], ["a", "b"])],
                              counts=True)
    r = await post_binary(http, "/api/v1/push", body)
    assert (r.status_code, r.json()) == (201, {"count": 2, "queued": 2, "duplicate": 0,
                                               "error": None})
    framed = encode_push_frames([PushBatch(queue_name, "p", [b"3", b"4"], ["b", "c"])],
                                counts=True)
    r = await post_binary(http, "/api/v1/push", framed)
    assert r.json() == {"count": 2, "queued": 1, "duplicate": 1, "error": None}
    tx = encode_transaction_frames(b'{"operations":[]}', [PushBatch(
        queue_name, "p", [b"5", b"6"], ["c", "d"])], counts=True)
    r = await post_binary(http, "/api/v1/transaction", tx)
    answer = r.json()
    assert (answer["success"], answer["results"], answer["pushed"], answer["duplicate"],
            answer["acked"]) == (True, [], 1, 1, 0)


async def test_binary_transaction_lists_head_operations_first_and_rolls_back_whole(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["work"])
    popped = await pop_json(http, queue_name)
    assert popped is not None
    [message] = popped["messages"]
    out = queue_name + "-out"
    ack = {"type": "ack", "transactionId": message["transactionId"],
           "partitionId": message["partitionId"], "status": "completed",
           "leaseId": message["leaseId"]}
    head = json.dumps({"operations": [ack], "requiredLeases": [message["leaseId"]]}).encode()
    body = encode_transaction_frames(head, [PushBatch(out, "Default", [b'"x"', b'"y"'],
                                                      ["x", "y"])])
    r = await post_binary(http, "/api/v1/transaction", body)
    answer = r.json()
    assert answer["success"] is True, answer
    assert [(e["index"], e["type"], e["transactionId"]) for e in answer["results"]] == [
        (0, "ack", message["transactionId"]), (1, "push", "x"), (2, "push", "y")]
    assert [r["payload"] for r in (await fetch_records(http, out))["records"]] == ["x", "y"]
    # The same bundle again: the lease is gone, so nothing of it applies.
    again = await post_binary(http, "/api/v1/transaction", encode_transaction_frames(
        head, [PushBatch(out + "2", "Default", [b'"z"'], ["z"])]))
    assert again.status_code == 200
    assert (again.json()["success"], again.json()["results"]) == (False, [])
    assert "lease" in again.json()["error"]
    assert (await queue_counts(db, out + "2"))["queues"] == 0


def _v4_frames(queue: str) -> bytes:
    frame = bytes([0]) + uuid.uuid4().bytes + b"\x01\x00t" + b"1"
    z = zstandard.ZstdCompressor(level=1).compress(struct.pack("<I", len(frame)) + frame)
    q = queue.encode()
    return (b"QPB1\x08\x01\x00\x00\x00" + struct.pack("<H", len(q)) + q + b"\x00\x00"
            + struct.pack("<II", 1, len(z)) + z)


def _bomb_group(queue: str) -> bytes:
    bomb = zstandard.ZstdCompressor(level=1).compress(b"\x00" * (64 << 20))
    q = queue.encode()
    return (struct.pack("<H", len(q)) + q + b"\x00\x00" + struct.pack("<II", 1, len(bomb))
            + bomb)


BAD_PUSHES: list[tuple[str, Any, int, str]] = [
    ("bad magic", lambda q: b"QPB9\x04\x00\x00\x00\x00", 400, "not QPB1"),
    ("truncated", lambda q: encode_push_binary([PushBatch(q, "p", [b"1"], ["t"])])[:-1], 400,
     "groups[0].items[0].payload needs 1 bytes"),
    ("length past the end", lambda q: b"QPB1\x04\x01\x00\x00\x00\xff\xff" + q.encode(), 400,
     "groups[0].queue needs 65535 bytes"),
    ("unknown flag", lambda q: b"QPB1\x20\x00\x00\x00\x00", 400, "flags 32 has unknown bits"),
    ("framed with zstd flag", lambda q: b"QPB1\x09\x00\x00\x00\x00", 400, "cannot be combined"),
    ("bad name", lambda q: encode_push_binary([PushBatch(q + "/x", "p", [b"1"], ["t"])]), 400,
     "groups[0].queue must not contain '/'"),
    ("bad payload", lambda q: encode_push_binary([PushBatch(q, "p", [b"{1}"], ["t"])]), 400,
     "groups[0].items[0].payload is not valid JSON"),
    ("payload not UTF-8", lambda q: encode_push_binary([PushBatch(q, "p", [b'"\xff"'], ["t"])]),
     400, "groups[0].items[0].payload is not valid UTF-8"),
    ("zstd bomb", lambda q: b"QPB1\x08\x01\x00\x00\x00" + _bomb_group(q), 413,
     f"groups[0].frames declares {64 << 20} bytes of content"),
    ("not a UUIDv7", lambda q: _v4_frames(q), 400, "is not a UUIDv7"),
]


@pytest.mark.parametrize(("build", "status", "text"), [c[1:] for c in BAD_PUSHES],
                         ids=[c[0] for c in BAD_PUSHES])
async def test_malformed_binary_push_is_refused_naming_it_and_writes_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, build: Any,
        status: int, text: str) -> None:
    r = await post_binary(http, "/api/v1/push", build(queue_name))
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    assert text in r.json()["error"], r.json()
    assert (await queue_counts(db, queue_name))["queues"] == 0


async def test_malformed_binary_transaction_answers_the_failure_shape(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    good = encode_transaction_frames(b'{"operations":[]}', [PushBatch(
        queue_name, "p", [b"1"], ["t"])])
    for body, text in [(good[:-2], "binary transaction: "), (b"QTB1\x04", "flags 4"),
                       (b"QTB1\x00\x01\x00\x00\x00{", "head: bad body")]:
        r = await post_binary(http, "/api/v1/transaction", body)
        assert r.status_code == 400, r.text
        answer = r.json()
        assert (answer["success"], answer["results"]) == (False, []) and text in answer["error"]
    assert (await queue_counts(db, queue_name))["queues"] == 0


async def test_content_type_decides_the_decoder(http: httpx.AsyncClient,
                                                queue_name: str) -> None:
    binary = encode_push_binary([PushBatch(queue_name, "p", [b"1"], ["t"])])
    r = await post_binary(http, "/api/v1/push", binary,
                          "Application/X-Queen-Push; charset=binary")
    assert r.status_code == 201, r.text
    r = await post_binary(http, "/api/v1/push", binary, "application/json")
    assert r.status_code == 400 and r.json()["error"].startswith("bad body")
    json_body = b'{"items": [{"queue": "%s", "payload": 1}]}' % queue_name.encode()
    r = await post_binary(http, "/api/v1/push", json_body)
    assert r.status_code == 400 and "not QPB1" in r.json()["error"]
    # Other routes take JSON whatever the header says.
    r = await post_binary(http, "/api/v1/configure", b'{"queue": "%s"}' % queue_name.encode())
    assert r.status_code == 200, r.text


async def test_too_many_binary_items_is_413(http: httpx.AsyncClient, queue_name: str) -> None:
    body = encode_push_binary([PushBatch(queue_name, "p", [b"1"] * 10_001,
                                         [f"t{i}" for i in range(10_001)])])
    r = await post_binary(http, "/api/v1/push", body)
    assert r.status_code == 413 and "more than 10000 items" in r.json()["error"]


async def framed(http: httpx.AsyncClient, path: str, **params: str) -> httpx.Response:
    return await http.get(path, params={"wait": "false", "frames": "true", **params})


async def test_framed_pop_answers_what_the_json_pop_answers(
        http: httpx.AsyncClient, queue_name: str) -> None:
    for p in ("A", "B"):
        await push_items(http, queue_name, [{"p": p, "i": i} for i in range(3)], partition=p,
                         prefix=p)
    r = await framed(http, f"/api/v1/pop/queue/{queue_name}", batch="6", partitions="2",
                     consumerGroup="g1", autopilot="true")
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-queen-pop"
    assert r.content[:5] == b"QPF1\x01"  # version 1: the autopilot echo travels as extras
    got = decode_pop_frames(r.content)
    j = await pop_json(http, queue_name, batch=6, partitions=2, consumerGroup="g2",
                       autopilot=True)
    assert j is not None
    keys = ("partition", "id", "transactionId", "traceId", "data", "producerSub",
            "partitionId", "createdAt")
    # The claim order of partitions is random; within a partition, offset order.
    framed_view = sorted([m[k] for k in keys] for m in got["messages"])
    json_view = sorted([m[k] if k != "createdAt" else m[k][:23] + "Z" for k in keys]
                       for m in j["messages"])
    assert framed_view == json_view
    assert got["autopilot"] == j["autopilot"] == {"partitions": 2, "batch": 6, "waitMs": 100}
    assert (got["queue"], got["partitionsClaimed"], got["consumerGroup"]) == (
        queue_name, 2, "g1")
    # The framed lease is a real lease: its batch acks like any other.
    ack = await http.post("/api/v1/ack/batch", json={"consumerGroup": "g1", "acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "leaseId": m["leaseId"], "status": "completed"} for m in got["messages"]]})
    assert all(a["success"] for a in ack.json()), ack.text


async def test_framed_pop_empty_auto_ack_and_discovery(
        http: httpx.AsyncClient, queue_name: str) -> None:
    r = await framed(http, f"/api/v1/pop/queue/{queue_name}")
    assert r.status_code == 204 and r.content == b""
    namespace = "ns" + uuid.uuid4().hex[:8]
    await push_items(http, f"{namespace}.t.{queue_name}", ["a", "b"])
    r = await framed(http, "/api/v1/pop", namespace=namespace, autoAck="true", batch="5")
    assert r.status_code == 200 and r.content[:5] == b"QPF1\x00"
    got = decode_pop_frames(r.content)
    assert (got["queue"], got["leaseId"], [m["data"] for m in got["messages"]]) == (
        "", "", ["a", "b"])
    assert (await framed(http, "/api/v1/pop", namespace=namespace)).status_code == 204


async def test_openapi_documents_the_binary_bodies_and_the_framed_answer(
        http: httpx.AsyncClient) -> None:
    document = (await http.get("/openapi.json")).json()
    for path in ("/api/v1/push", "/api/v1/transaction"):
        content = document["paths"][path]["post"]["requestBody"]["content"]
        assert set(content) == {"application/json", "application/x-queen-push"}
        assert content["application/x-queen-push"]["schema"]["format"] == "binary"
        assert "QPB1" in content["application/x-queen-push"]["schema"]["description"] or \
            "QTB1" in content["application/x-queen-push"]["schema"]["description"]
    pop = document["paths"]["/api/v1/pop/queue/{queue}"]["get"]["responses"]["200"]["content"]
    assert set(pop) == {"application/json", "application/x-queen-pop"}


def framed_records(answer: bytes) -> list[tuple[int, int, int, bytes]]:
    """(base_offset, frame_count, codec, bytes) of every record of a framed pop answer."""
    at = 5 + (4 + struct.unpack_from("<I", answer, 5)[0] if answer[4] == 1 else 0)
    for _ in range(3):
        at += 2 + struct.unpack_from("<H", answer, at)[0]
    (claims,) = struct.unpack_from("<I", answer, at)
    at += 4
    out = []
    for _ in range(claims):
        at += 8
        at += 2 + struct.unpack_from("<H", answer, at)[0]
        (records,) = struct.unpack_from("<I", answer, at + 20)
        at += 24
        for _ in range(records):
            base, _created, count, codec, size = struct.unpack_from("<QqIBI", answer, at)
            at += 25
            out.append((base, count, codec, answer[at:at + size]))
            at += size
    assert at == len(answer)
    return out


async def test_framed_push_then_framed_pop_moves_the_clients_bytes_unchanged(
        http: httpx.AsyncClient, queue_name: str) -> None:
    body = encode_push_frames([PushBatch(queue_name, "Default", [b'{"i":%d}' % i
                                                                 for i in range(100)],
                                         [f"t{i}" for i in range(100)])])
    assert (await post_binary(http, "/api/v1/push", body)).status_code == 201
    # One message of the hundred: only its frame travels, decompressed.
    r = await framed(http, f"/api/v1/pop/queue/{queue_name}", batch="1", consumerGroup="one")
    [(base, count, codec, data)] = framed_records(r.content)
    assert (base, count, codec) == (0, 1, 0)
    assert data == segments.frame_range(segments.decompress(z_of(body)), 0, 1)
    # All of them: the stored segment, which is the client's zstd frame, byte for byte.
    r = await framed(http, f"/api/v1/pop/queue/{queue_name}", batch="100",
                     consumerGroup="all")
    assert framed_records(r.content) == [(0, 100, 1, z_of(body))]
    got = decode_pop_frames(r.content)["messages"]
    assert [(m["transactionId"], m["data"], m["offset"]) for m in got] == [
        (f"t{i}", {"i": i}, i) for i in range(100)]
    # The rest of the first group's backlog after an ack: offsets 1.., stored blob again.
    ack = await http.post("/api/v1/ack", json={
        "transactionId": "t0", "partitionId": got[0]["partitionId"], "consumerGroup": "one"})
    assert ack.json()[0]["success"] is True, ack.text
    r = await framed(http, f"/api/v1/pop/queue/{queue_name}", batch="99", consumerGroup="one")
    assert framed_records(r.content) == [(0, 100, 1, z_of(body))]
    assert [m["offset"] for m in decode_pop_frames(r.content)["messages"]] == list(
        range(1, 100))
