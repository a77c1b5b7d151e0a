"""Bad input: a 4xx with a JSON error naming the problem, and nothing written (§1, §4.1, §4.9)."""

from __future__ import annotations

import gzip
import json
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support import queue_counts

Q = "{queue}"  # replaced by the test's own queue name


def _fill(value: Any, queue: str) -> Any:
    if isinstance(value, str):
        return value.replace(Q, queue)
    if isinstance(value, list):
        return [_fill(v, queue) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, queue) for k, v in value.items()}
    return value


async def _assert_error(r: httpx.Response, status: int, fragment: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert set(body) == {"error"}
    assert fragment in body["error"], body["error"]


async def _assert_nothing_written(db: asyncpg.Connection, queue: str) -> None:
    assert await queue_counts(db, queue) == {
        "queues": 0, "partitions": 0, "segments": 0, "txn_index": 0}


BAD_PUSH_BODIES: list[tuple[str, Any, str]] = [
    ("items_not_array", {"items": {"queue": Q}}, "items array is required"),
    ("items_string", {"items": Q}, "items array is required"),
    ("items_number", {"items": 3}, "items array is required"),
    ("item_not_object", {"items": [{"queue": Q, "payload": 1}, 5]},
     "items[1] must be an object"),
    ("missing_items", {"queue": Q, "payload": 1}, "items array is required"),
    ("items_null", {"items": None}, "items array is required"),
    ("body_is_array", [{"queue": Q}], "bad body"),
    ("missing_queue", {"items": [{"queue": Q, "payload": 1}, {"payload": 2}]},
     "items[1].queue is required"),
    ("queue_null", {"items": [{"queue": None}]}, "items[0].queue is required"),
    ("queue_number", {"items": [{"queue": Q}, {"queue": 7}]}, "items[1].queue must be a string"),
    ("queue_object", {"items": [{"queue": {"name": Q}}]}, "items[0].queue must be a string"),
    ("partition_number", {"items": [{"queue": Q, "partition": 3}]},
     "items[0].partition must be a string"),
    ("transaction_id_number", {"items": [{"queue": Q, "transactionId": 12}]},
     "items[0].transactionId must be a string"),
    ("trace_id_number", {"items": [{"queue": Q, "traceId": 1}]},
     "items[0].traceId must be a string"),
    ("trace_id_not_uuid", {"items": [{"queue": Q, "traceId": "not-a-uuid"}]},
     "items[0].traceId must be a UUID"),
    ("queue_with_nul", {"items": [{"queue": Q + "\x00x"}]}, "items[0].queue contains control"),
    ("queue_with_newline", {"items": [{"queue": Q + "\nx"}]}, "items[0].queue contains control"),
    ("queue_with_del", {"items": [{"queue": Q + "\x7f"}]}, "items[0].queue contains control"),
    ("partition_with_tab", {"items": [{"queue": Q, "partition": "a\tb"}]},
     "items[0].partition contains control"),
    ("transaction_id_with_escape", {"items": [{"queue": Q, "transactionId": "t\x1b"}]},
     "items[0].transactionId contains control"),
    ("queue_over_255_bytes", {"items": [{"queue": Q + "x" * 256}]},
     "items[0].queue is longer than 255 bytes"),
    ("queue_over_255_bytes_multibyte", {"items": [{"queue": Q + "é" * 125}]},
     "items[0].queue is longer than 255 bytes"),
    ("partition_over_255_bytes", {"items": [{"queue": Q, "partition": "p" * 256}]},
     "items[0].partition is longer than 255 bytes"),
    ("transaction_id_over_65535_bytes", {"items": [{"queue": Q, "transactionId": "t" * 65536}]},
     "items[0].transactionId is longer than 65535 bytes"),
]


@pytest.mark.parametrize(("body", "fragment"), [(b, f) for _, b, f in BAD_PUSH_BODIES],
                         ids=[name for name, _, _ in BAD_PUSH_BODIES])
async def test_bad_push_body_answers_400_naming_the_problem_and_writes_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, body: Any,
        fragment: str) -> None:
    r = await http.post("/api/v1/push", json=_fill(body, queue_name))
    await _assert_error(r, 400, fragment)
    await _assert_nothing_written(db, queue_name)


@pytest.mark.parametrize(("raw", "fragment"), [
    (b'{"items": [', "bad body"),
    (b"not json at all", "bad body"),
    (b'{"items": [{"queue": "\xff\xfe"}]}', "bad body"),
    (b"\x00\x01", "bad body"),
    # msgspec reports a lone high surrogate as truncated input
    (b'{"items": [{"queue": "q", "payload": "\\ud800"}]}',
     "the escape \\ud800 at byte 38 is half of a surrogate pair"),
    (b'{"items": [{"queue": "q", "payload": "\\\\ud800"', "bad body: Input data was truncated"),
])
async def test_malformed_json_push_answers_400_bad_body(
        http: httpx.AsyncClient, raw: bytes, fragment: str) -> None:
    r = await http.post("/api/v1/push", content=raw,
                        headers={"content-type": "application/json"})
    await _assert_error(r, 400, fragment)


async def test_an_integer_longer_than_python_decodes_is_refused_and_nothing_written(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    """Python's json.loads (the official client's pops) refuses an integer of more than 4300
    digits, and with it the whole answer: stored, it would stop every pop of its partition
    for such a consumer. Refused at the push, the push's other items with it."""
    body = (b'{"items": [{"queue": "%s", "payload": {"n": 1}}, {"queue": "%s", "payload": '
            b'{"n": %s}}]}' % (queue_name.encode(), queue_name.encode(), b"7" * 4301))
    r = await http.post("/api/v1/push", content=body,
                        headers={"content-type": "application/json"})
    await _assert_error(r, 400, "an integer of more than 4300 digits")
    await _assert_nothing_written(db, queue_name)


async def test_integers_python_decodes_and_strings_of_digits_are_stored(
        http: httpx.AsyncClient, queue_name: str) -> None:
    longest, digits = "9" * 4300, "5" * 9000  # a number at the limit; a string, no number
    body = (b'{"items": [{"queue": "%s", "payload": {"n": %s, "s": "%s"}}]}'
            % (queue_name.encode(), longest.encode(), digits.encode()))
    r = await http.post("/api/v1/push", content=body,
                        headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text
    popped = await http.get(f"/api/v1/pop/queue/{queue_name}", params={"wait": "false"})
    assert popped.status_code == 200, popped.text
    data = json.loads(popped.content)["messages"][0]["data"]
    assert data == {"n": int(longest), "s": digits}


async def test_a_compressed_body_answers_415_naming_its_encoding_and_the_connection_goes_on(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    """A gzip body used to be read as JSON and refused for its bytes ("invalid UTF-8 at byte
    1"), which names the wrong problem; the body is still read to its end, so the kept-alive
    connection serves the next request."""
    body = gzip.compress(json.dumps({"items": [{"queue": queue_name, "payload": 1}]}).encode())
    r = await http.post("/api/v1/push", content=body, headers={
        "content-type": "application/json", "content-encoding": "gzip"})
    await _assert_error(r, 415, "Content-Encoding 'gzip' is not supported")
    await _assert_nothing_written(db, queue_name)
    r = await http.post("/api/v1/push", json={"items": [{"queue": queue_name, "payload": 1}]},
                        headers={"content-encoding": "identity"})
    assert r.status_code == 201, r.text


async def test_deeply_nested_json_answers_400_not_500(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    depth = 100_000
    too_deep = "bad body: JSON is nested too deeply"
    for route, head, tail, fragment in [
            ("/api/v1/push", b'{"items": [{"queue": "' + queue_name.encode() + b'", "payload": ',
             b"}]}", too_deep),
            # configure refuses an unknown key before it reads the key's value
            ("/api/v1/configure", b'{"queue": "' + queue_name.encode() + b'", "x": ', b"}",
             "unknown option x"),
            ("/api/v1/traces", b'{"transactionId": "t", "partitionId": "1", "data": ', b"}",
             too_deep),
            ("/api/v1/fetch", b'{"entries": [], "x": ', b"}", too_deep)]:
        body = head + b"[" * depth + b"]" * depth + tail
        r = await http.post(route, content=body, headers={"content-type": "application/json"})
        await _assert_error(r, 400, fragment)
    await _assert_nothing_written(db, queue_name)


async def test_moderately_nested_payload_is_accepted(
        http: httpx.AsyncClient, queue_name: str) -> None:
    payload: object = "leaf"
    for _ in range(100):
        payload = {"n": [payload]}
    r = await http.post("/api/v1/push", json={"items": [{"queue": queue_name,
                                                         "payload": payload}]})
    assert r.status_code == 201 and r.json()[0]["status"] == "queued"


@pytest.mark.parametrize(("path", "fragment"), [
    ("/api/v1/resources/queues/a%00b", "queue contains control characters"),
    ("/api/v1/resources/queues/" + "x" * 256, "queue is longer than 255 bytes"),
])
async def test_bad_queue_name_in_delete_path_answers_400(
        http: httpx.AsyncClient, path: str, fragment: str) -> None:
    await _assert_error(await http.delete(path), 400, fragment)


async def test_empty_configure_body_answers_queue_is_required(
        http: httpx.AsyncClient) -> None:
    await _assert_error(await http.post("/api/v1/configure"), 400, "queue is required")


async def test_one_bad_item_rejects_the_whole_push_before_anything_is_written(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    good = [{"queue": queue_name, "payload": i} for i in range(5)]
    r = await http.post("/api/v1/push", json={"items": [*good, {"queue": queue_name,
                                                                 "partition": ["x"]}]})
    await _assert_error(r, 400, "items[5].partition must be a string")
    await _assert_nothing_written(db, queue_name)


async def test_empty_push_body_answers_items_array_is_required(
        http: httpx.AsyncClient) -> None:
    r = await http.post("/api/v1/push")
    await _assert_error(r, 400, "items array is required")
    r = await http.post("/api/v1/push", content=b"{}",
                        headers={"content-type": "application/json"})
    await _assert_error(r, 400, "items array is required")


async def test_empty_items_answers_201_with_an_empty_array(http: httpx.AsyncClient) -> None:
    r = await http.post("/api/v1/push", json={"items": []})
    assert r.status_code == 201
    assert r.headers["content-type"] == "application/json"
    assert r.json() == []


async def test_boundary_lengths_are_accepted(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    queue = queue_name + "é" * ((255 - len(queue_name)) // 2)  # at most 255 bytes
    txid = "t" * 65535
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": "p" * 255, "transactionId": txid, "payload": 1}]})
    assert r.status_code == 201, r.text
    (entry,) = r.json()
    assert entry["status"] == "queued" and entry["transaction_id"] == txid
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": "p" * 255, "transactionId": txid, "payload": 2}]})
    assert r.json()[0]["status"] == "duplicate"
    # The stored transactionId, read back (the index keeps only a key of it).
    r = await http.post("/api/v1/fetch", json={"entries": [
        {"queue": queue, "partition": "p" * 255, "offset": 0}]})
    [record] = r.json()["entries"][0]["records"]
    stored = len(record["transactionId"])
    assert stored == 65535


async def test_unknown_route_answers_404_json(http: httpx.AsyncClient) -> None:
    for method, path in [("GET", "/api/v1/nothing-here"), ("POST", "/api/v2/push"),
                         ("GET", "/nothing"), ("GET", "/index.html")]:
        r = await http.request(method, path)
        await _assert_error(r, 404, "no route for")


async def test_wrong_method_on_a_known_route_answers_405_json(http: httpx.AsyncClient) -> None:
    r = await http.get("/api/v1/push")
    await _assert_error(r, 405, "method GET is not allowed on /api/v1/push")


BAD_CONFIGURE_BODIES: list[tuple[str, Any, str]] = [
    ("queue_missing", {"options": {"leaseTime": 5}}, "queue is required"),
    ("queue_number", {"queue": 5}, "queue is required"),
    ("queue_null", {"queue": None}, "queue is required"),
    ("queue_control_char", {"queue": Q + "\x01"}, "queue contains control characters"),
    ("queue_too_long", {"queue": Q + "q" * 256}, "queue is longer than 255 bytes"),
    ("namespace_number", {"queue": Q, "namespace": 1}, "namespace must be a string"),
    ("task_control_char", {"queue": Q, "task": "a\nb"}, "task contains control characters"),
    ("options_not_object", {"queue": Q, "options": [1]}, "options must be an object"),
    ("option_string", {"queue": Q, "options": {"leaseTime": "10"}},
     "option leaseTime must be a number"),
    ("option_bool_for_number", {"queue": Q, "options": {"retryLimit": True}},
     "option retryLimit must be a number"),
    ("option_number_for_bool", {"queue": Q, "options": {"encryptionEnabled": 1}},
     "option encryptionEnabled must be a boolean"),
    ("option_negative", {"queue": Q, "options": {"dedupWindowSeconds": -1}},
     "option dedupWindowSeconds must not be negative"),
    ("option_fraction", {"queue": Q, "options": {"leaseTime": 1.5}},
     "option leaseTime must be a whole number"),
    ("top_level_option_negative", {"queue": Q, "retryLimit": -3},
     "option retryLimit must not be negative"),
    ("bad_mode", {"queue": Q, "mode": "upsert"}, 'mode must be "merge" or "replace"'),
    ("body_is_array", [Q], "bad body"),
]


@pytest.mark.parametrize(("body", "fragment"), [(b, f) for _, b, f in BAD_CONFIGURE_BODIES],
                         ids=[name for name, _, _ in BAD_CONFIGURE_BODIES])
async def test_bad_configure_answers_400_naming_the_problem_and_creates_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, body: Any,
        fragment: str) -> None:
    r = await http.post("/api/v1/configure", json=_fill(body, queue_name))
    await _assert_error(r, 400, fragment)
    await _assert_nothing_written(db, queue_name)


async def test_bad_configure_of_an_existing_queue_leaves_its_options_unchanged(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    r = await http.post("/api/v1/configure", json={"queue": queue_name,
                                                   "options": {"leaseTime": 42}})
    assert r.status_code == 200
    r = await http.post("/api/v1/configure", json={
        "queue": queue_name, "options": {"retryLimit": 1, "leaseTime": -1}})
    await _assert_error(r, 400, "option leaseTime must not be negative")
    stored = json.loads(await db.fetchval(
        "SELECT options::text FROM queen.queues WHERE name = $1", queue_name))
    assert stored["leaseTime"] == 42 and stored["retryLimit"] == 3


BAD_FETCH_BODIES: list[tuple[str, Any, str]] = [
    ("negative_offset", {"entries": [{"queue": Q, "offset": -1}]},
     "entries[0].offset must be between 0 and 4611686018427387904"),
    ("string_offset", {"entries": [{"queue": Q, "offset": "abc"}]},
     "entries[0].offset must be an integer"),
    ("numeric_string_offset", {"entries": [{"queue": Q, "offset": "3"}]},
     "entries[0].offset must be an integer"),
    ("float_offset", {"entries": [{"queue": Q, "offset": 1.5}]},
     "entries[0].offset must be an integer"),
    ("too_many_entries", {"entries": [{"queue": Q, "offset": 0}] * 1025},
     "1025 entries is over the limit of 1024"),
    ("missing_entries", {}, "entries array is required"),
    ("entries_not_array", {"entries": {"queue": Q}}, "entries array is required"),
    ("entry_not_object", {"entries": [3]}, "entries[0] must be an object"),
    ("entry_missing_queue", {"entries": [{"offset": 0}]}, "entries[0].queue is required"),
    ("entry_queue_number", {"entries": [{"queue": 9}]}, "entries[0].queue must be a string"),
    ("max_bytes_too_big", {"entries": [{"queue": Q, "maxBytes": 9 * 1024 * 1024}]},
     "entries[0].maxBytes must be between 1 and 8388608"),
    ("max_wait_negative", {"entries": [{"queue": Q}], "maxWaitMs": -1},
     "maxWaitMs must be between 0 and 30000"),
]


@pytest.mark.parametrize(("body", "fragment"), [(b, f) for _, b, f in BAD_FETCH_BODIES],
                         ids=[name for name, _, _ in BAD_FETCH_BODIES])
async def test_bad_fetch_answers_400_naming_the_problem(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, body: Any,
        fragment: str) -> None:
    r = await http.post("/api/v1/fetch", json=_fill(body, queue_name))
    await _assert_error(r, 400, fragment)
    await _assert_nothing_written(db, queue_name)


async def test_fetch_of_unknown_queue_is_a_per_entry_error_not_a_failure(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    r = await http.post("/api/v1/fetch", json={"entries": [{"queue": queue_name}]})
    assert r.status_code == 200
    (entry,) = r.json()["entries"]
    assert entry["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert entry["records"] == [] and entry["highWatermark"] == 0
    await _assert_nothing_written(db, queue_name)
