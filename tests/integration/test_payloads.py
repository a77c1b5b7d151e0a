"""Payloads of every JSON type round-trip unchanged (§4.1), read back through /api/v1/fetch."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from core import segments
from tests.support import fetch_records

PAYLOADS: list[Any] = [
    None, {}, [], "", "plain text", 0, -17, 3.25, 1e300, True, False,
    [1, "two", None, {"three": [3]}],
    {"nested": {"deeper": {"deepest": [{"k": "v"}, [[], {}]]}}},
    {"unicode": "héllo wörld — 日本語 — 🚀", "escapes": "quote\" backslash\\ nl\n tab\t \u0000"},
    "🙂" * 100,
]


async def _push(http: httpx.AsyncClient, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    r = await http.post("/api/v1/push", json={"items": items})
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_every_json_type_round_trips_unchanged(
        http: httpx.AsyncClient, queue_name: str) -> None:
    answers = await _push(http, [{"queue": queue_name, "payload": p} for p in PAYLOADS])
    assert [a["status"] for a in answers] == ["queued"] * len(PAYLOADS)
    entry = await fetch_records(http, queue_name)
    assert [r["payload"] for r in entry["records"]] == PAYLOADS


async def test_payload_bytes_are_stored_exactly_as_sent(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    # Key order, spacing and number spelling survive: the broker never re-encodes a payload.
    raw_payload = b'{ "z" : 1,  "a" : [ 1.50, 2e3 ],\n "m": "\\u00e9" }'
    body = b'{"items": [{"queue": "' + queue_name.encode() + b'", "payload": ' + raw_payload + b"}]}"
    r = await http.post("/api/v1/push", content=body,
                        headers={"content-type": "application/json"})
    assert r.status_code == 201 and r.json()[0]["status"] == "queued"
    blob = await db.fetchval(
        """SELECT s.blob FROM queen.log_segments s JOIN queen.log_partitions p
             ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id
            WHERE q.name = $1""", queue_name)
    (frame,) = segments.unpack(blob)
    assert frame.payload == raw_payload
    r = await http.post("/api/v1/fetch", json={"entries": [{"queue": queue_name}]})
    assert raw_payload.decode() in r.text
    assert list(r.json()["entries"][0]["records"][0]["payload"]) == ["z", "a", "m"]


async def test_missing_payload_is_null_and_data_is_accepted_as_the_payload_key(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await _push(http, [{"queue": queue_name},
                       {"queue": queue_name, "data": {"from": "data"}},
                       {"queue": queue_name, "payload": "p", "data": "d"},
                       {"queue": queue_name, "payload": None}])
    entry = await fetch_records(http, queue_name)
    assert [r["payload"] for r in entry["records"]] == [None, {"from": "data"}, "p", None]


async def test_one_mebibyte_payload_round_trips(
        http: httpx.AsyncClient, queue_name: str) -> None:
    big = {"blob": "".join(chr(0x41 + (i * 7) % 26) for i in range(1024 * 1024)),
           "tail": "é"}
    answers = await _push(http, [{"queue": queue_name, "payload": big},
                                 {"queue": queue_name, "payload": "after"}])
    assert [a["status"] for a in answers] == ["queued", "queued"]
    entry = await fetch_records(http, queue_name)
    assert [r["offset"] for r in entry["records"]] == [0, 1]
    assert entry["records"][0]["payload"] == big
    assert entry["records"][1]["payload"] == "after"


async def test_trace_id_is_echoed_for_queued_items_and_stored_in_the_frame(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    trace = str(uuid.uuid4())
    answers = await _push(http, [{"queue": queue_name, "payload": 1, "traceId": trace},
                                 {"queue": queue_name, "payload": 2}])
    assert answers[0]["trace_id"] == trace
    assert answers[1]["trace_id"] is None
    blob = await db.fetchval(
        """SELECT s.blob FROM queen.log_segments s JOIN queen.log_partitions p
             ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id
            WHERE q.name = $1""", queue_name)
    frames = segments.unpack(blob)
    assert [str(f.trace_id) if f.trace_id else None for f in frames] == [trace, None]
    assert [f.producer_sub for f in frames] == [None, None]


async def test_producer_sub_in_the_body_is_ignored(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await _push(http, [{"queue": queue_name, "payload": 1, "producerSub": "forged"}])
    blob = await db.fetchval(
        """SELECT s.blob FROM queen.log_segments s JOIN queen.log_partitions p
             ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id
            WHERE q.name = $1""", queue_name)
    (frame,) = segments.unpack(blob)
    assert frame.producer_sub is None


@pytest.mark.parametrize("partition", ["Default", "", "p:with;marks", "名前", "a b"])
async def test_partition_names_round_trip_and_empty_means_default(
        http: httpx.AsyncClient, queue_name: str, partition: str) -> None:
    (answer,) = await _push(http, [{"queue": queue_name, "partition": partition, "payload": 1}])
    assert answer["status"] == "queued"
    entry = await fetch_records(http, queue_name, partition or "Default")
    assert [r["payload"] for r in entry["records"]] == [1]


async def test_push_answer_has_the_documented_keys(
        http: httpx.AsyncClient, queue_name: str) -> None:
    (answer,) = await _push(http, [{"queue": queue_name, "transactionId": "k", "payload": 1}])
    assert answer["index"] == 0
    assert answer["transaction_id"] == answer["transactionId"] == "k"
    assert answer["message_id"] == answer["messageId"]
    assert uuid.UUID(answer["message_id"]).version == 7
    assert answer["queueName"] == queue_name
    assert answer["status"] == "queued"
    assert answer["partition_id"].isdigit()
