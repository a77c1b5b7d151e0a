"""The HTTP edge against what fuzzers miss (docs/architecture/reliability.md, "Fuzzing and bad input"): HEAD on a pop,
poison payloads, refused transactions, half-applied batches, ids and timestamps that used to
reach SQL, bodies that wedged a connection, and names that could not be addressed again.
Every case checks what the database holds afterwards, not just the status.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest

from tests.support import (
    BrokerProcess,
    cursor_row,
    dlq_rows,
    fetch_records,
    pop_json,
    push_items,
    queue_counts,
)

NOTHING = {"queues": 0, "partitions": 0, "segments": 0, "txn_index": 0}


def raw_exchange(url: str, data: bytes, *, answers: int = 1, timeout: float = 5.0,
                 half_close: bool = False) -> list[bytes]:
    """Send raw bytes on one connection; collect up to `answers` HTTP answers (status line
    and headers through the body) until the deadline or the connection closes."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        received = b""
        try:
            while received.count(b"HTTP/1.1 ") < answers or not _complete(received):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except TimeoutError:
            pass
    return [b"HTTP/1.1 " + part for part in received.split(b"HTTP/1.1 ")[1:]]


def _complete(received: bytes) -> bool:
    last = received.rsplit(b"HTTP/1.1 ", 1)[-1]
    head, sep, body = last.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return True


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def body_of(answer: bytes) -> Any:
    body = answer.partition(b"\r\n\r\n")[2]
    assert body, answer
    return json.loads(body)


# --- HEAD and other methods ------------------------------------------------------------

@pytest.mark.parametrize("auto_ack", ["true", "false"])
async def test_head_on_a_pop_route_answers_405_and_takes_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str,
        auto_ack: str) -> None:
    await push_items(http, queue_name, ["a", "b"], partition="P")
    query = {"batch": "10", "autoAck": auto_ack, "consumerGroup": "g"}
    for path, extra in ((f"/api/v1/pop/queue/{queue_name}", {}),
                        (f"/api/v1/pop/queue/{queue_name}/partition/P", {}),
                        ("/api/v1/pop", {"namespace": queue_name})):
        r = await http.head(path, params={**query, **extra})
        assert r.status_code == 405, path
        assert r.headers["allow"] == "GET"
    assert await cursor_row(db, queue_name, "g", "P") is None  # nothing committed or leased
    body = await pop_json(http, queue_name, batch=10, consumerGroup="g")
    assert body is not None and [m["data"] for m in body["messages"]] == ["a", "b"]


async def test_read_only_gets_still_answer_head(http: httpx.AsyncClient) -> None:
    for path in ("/health", "/api/v1/resources/queues", "/openapi.json"):
        r = await http.head(path)
        assert r.status_code == 200 and r.content == b"", path


@pytest.mark.parametrize(("method", "path"), [
    ("PUT", "/api/v1/push"), ("PATCH", "/api/v1/ack"), ("DELETE", "/api/v1/ack/batch"),
    ("GET", "/api/v1/transaction"), ("PUT", "/api/v1/configure"),
    ("POST", "/api/v1/pop/queue/{queue}"), ("DELETE", "/api/v1/pop"),
    ("POST", "/api/v1/resources/queues/{queue}"),
])
async def test_unlisted_methods_answer_405_json_and_change_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, method: str,
        path: str) -> None:
    r = await http.request(method, path.format(queue=queue_name),
                           json={"items": [{"queue": queue_name, "payload": 1}],
                                 "queue": queue_name})
    assert r.status_code == 405, r.text
    assert r.headers["content-type"] == "application/json" and "error" in r.json()
    assert await queue_counts(db, queue_name) == NOTHING


# --- payloads --------------------------------------------------------------------------

async def test_a_payload_that_is_not_utf8_is_refused_and_cannot_poison_the_partition(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["before"], prefix="b")
    poison = b'{"items":[{"queue":"' + queue_name.encode() + b'","payload":"\xff"}]}'
    r = await http.post("/api/v1/push", content=poison,
                        headers={"content-type": "application/json"})
    assert r.status_code == 400
    at = poison.index(b"\xff")
    assert r.json() == {"error": f"bad body: invalid UTF-8 at byte {at}"}
    await push_items(http, queue_name, ["after"], prefix="a")
    assert (await queue_counts(db, queue_name))["txn_index"] == 2
    body = await pop_json(http, queue_name, batch=10)
    assert body is not None and [m["data"] for m in body["messages"]] == ["before", "after"]


@pytest.mark.parametrize("route", ["/api/v1/transaction", "/api/v1/ack", "/api/v1/configure"])
async def test_invalid_utf8_anywhere_in_a_body_is_a_400(http: httpx.AsyncClient,
                                                        route: str) -> None:
    r = await http.post(route, content=b'{"x": "\xc3\x28"}',
                        headers={"content-type": "application/json"})
    assert r.status_code == 400 and "invalid UTF-8" in r.json()["error"]


# --- atomicity -------------------------------------------------------------------------

async def _leased_message(http: httpx.AsyncClient, queue: str, group: str | None = None
                          ) -> dict[str, Any]:
    await push_items(http, queue, ["m"], prefix=f"{group or 'q'}-")
    params = {"consumerGroup": group} if group else {}
    body = await pop_json(http, queue, **params)
    assert body is not None
    return body["messages"][0]  # type: ignore[no-any-return]


async def _one_message_per_group(http: httpx.AsyncClient, queue: str
                                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    return await _leased_message(http, queue, "g1"), await _leased_message(http, queue, "g2")


async def _ack_batch(http: httpx.AsyncClient, first: dict[str, Any],
                     second: dict[str, Any]) -> httpx.Response:
    """A batch acking `first` in g1 and (the ack keys of) `second` in g2."""
    keys = ("transactionId", "partitionId", "leaseId")
    return await http.post("/api/v1/ack/batch", json={"acknowledgments": [
        {**{k: first[k] for k in keys}, "consumerGroup": "g1"},
        {**{k: second[k] for k in keys if k in second}, "consumerGroup": "g2"}]})


async def test_a_refused_transaction_creates_no_queue_and_no_partition(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    message = await _leased_message(http, queue_name)
    fresh = queue_name + "-new"
    bundle = {"operations": [
        {"type": "push", "items": [{"queue": fresh, "partition": "P", "payload": 1,
                                    "transactionId": "x1"}]},
        {"type": "ack", "transactionId": "no-such-message",
         "partitionId": message["partitionId"], "status": "completed"}]}
    r = await http.post("/api/v1/transaction", json=bundle)
    assert r.status_code == 200 and r.json()["success"] is False, r.text
    assert r.json()["reason"] == "ack_rejected"
    assert "'no-such-message'" in r.json()["error"]
    assert "rejected: unresolvable: " in r.json()["error"]
    assert await queue_counts(db, fresh) == NOTHING
    # Nothing of the refused bundle was remembered: the same push now lands normally.
    bundle["operations"] = bundle["operations"][:1]
    for _ in range(2):  # two calls, so both workers have had a chance to serve one
        r = await http.post("/api/v1/transaction", json=bundle)
        assert r.json()["success"] is True, r.text
    records = (await fetch_records(http, fresh, "P"))["records"]
    assert [(rec["offset"], rec["transactionId"]) for rec in records] == [(0, "x1")]


async def test_a_bad_item_anywhere_in_a_batch_ack_is_a_400_and_nothing_moves(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    first, second = await _one_message_per_group(http, queue_name)
    r = await _ack_batch(http, first, {"transactionId": "bad\x00id",
                                       "partitionId": second["partitionId"]})
    assert r.status_code == 400
    assert r.json() == {"error": "acknowledgments[1].transactionId contains control characters"}
    row = await cursor_row(db, queue_name, "g1")
    assert row is not None and (row["committed"], row["worker_id"]) == (-1, first["leaseId"])


async def test_a_batch_ack_applies_what_it_can_and_answers_per_item(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    first, second = await _one_message_per_group(http, queue_name)
    r = await _ack_batch(http, first, {**second, "leaseId": "someone-else"})
    assert r.status_code == 200
    assert [(e["success"], e["error"]) for e in r.json()] == [
        (True, None), (False, "invalid or expired lease")]
    g1, g2 = await cursor_row(db, queue_name, "g1"), await cursor_row(db, queue_name, "g2")
    assert g1 is not None and (g1["committed"], g1["worker_id"]) == (0, None)
    assert g2 is not None and (g2["committed"], g2["worker_id"]) == (-1, second["leaseId"])


# --- input that used to reach SQL ------------------------------------------------------

async def test_a_partition_id_that_is_not_ascii_digits_is_a_400_not_a_500(
        http: httpx.AsyncClient) -> None:
    for pid in ("²", "١٢", "1e3", "-1", "9" * 19, ""):
        r = await http.post("/api/v1/ack", json={"transactionId": "x", "partitionId": pid})
        assert r.status_code == 400, (pid, r.text)
        assert r.json()["error"].startswith("partitionId "), r.text


async def test_nul_in_an_ack_transaction_id_or_error_text_is_a_400_naming_it(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    message = await _leased_message(http, queue_name)
    base = {"transactionId": message["transactionId"], "partitionId": message["partitionId"],
            "leaseId": message["leaseId"]}
    r = await http.post("/api/v1/ack", json={**base, "transactionId": "t\x00"})
    assert (r.status_code, r.json()) == (
        400, {"error": "transactionId contains control characters"})
    r = await http.post("/api/v1/ack", json={**base, "status": "dlq", "error": "boom\x00"})
    assert (r.status_code, r.json()) == (400, {"error": "error contains a NUL character"})
    r = await http.post("/api/v1/transaction", json={"operations": [
        {"type": "ack", **base, "status": "dlq", "error": "\x00"}]})
    assert r.status_code == 400 and r.json()["success"] is False
    assert r.json()["error"] == "operations[0].error contains a NUL character"
    assert await dlq_rows(db, queue_name) == []
    row = await cursor_row(db, queue_name)
    assert row is not None and row["committed"] == -1
    # Newlines and tabs are fine in an error text (tracebacks have them).
    r = await http.post("/api/v1/ack", json={**base, "status": "dlq", "error": "a\n\tb"})
    assert r.json()[0]["dlq"] is True
    assert [d["error_message"] for d in await dlq_rows(db, queue_name)] == ["a\n\tb"]


OUT_OF_RANGE = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "10000-01-01",
                "0000-01-01T00:00:00Z", "2024-13-01", "yesterday"]


@pytest.mark.parametrize("stamp", OUT_OF_RANGE)
async def test_timestamps_outside_the_representable_range_are_400s(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, stamp: str) -> None:
    await push_items(http, queue_name, ["x"])
    base = "/api/v1/consumer-groups/g"
    answers = [
        await http.get("/api/v1/dlq", params={"from": stamp}),
        await http.get("/api/v1/dlq", params={"to": stamp}),
        await http.get("/api/v1/messages", params={"from": stamp}),
        await http.get(f"/api/v1/pop/queue/{queue_name}",
                       params={"consumerGroup": "g", "subscriptionFrom": stamp}),
        await http.post(f"{base}/queues/{queue_name}/seek", json={"timestamp": stamp}),
        await http.post(f"{base}/queues/{queue_name}/partitions/Default/seek",
                        json={"timestamp": stamp}),
        await http.post(f"{base}/subscription", json={"subscriptionTimestamp": stamp}),
    ]
    for r in answers:
        assert r.status_code == 400, (r.request.url, r.text)
        assert "ISO-8601" in r.json()["error"], r.text
    assert await cursor_row(db, queue_name, "g") is None


@pytest.mark.parametrize(("path", "param", "value"), [
    ("/api/v1/dlq", "limit", "99999999999999999999"),
    ("/api/v1/dlq", "offset", "-1"),
    ("/api/v1/dlq", "limit", "1e400"),
    ("/api/v1/messages", "limit", "NaN"),
    ("/api/v1/messages", "status", "everything"),
    ("/api/v1/resources/queues", "limit", "-5"),
    ("/api/v1/resources/partitions", "offset", "1.5"),
    ("/api/v1/consumer-groups/lagging", "minLagSeconds", "-1"),
    ("/api/v1/pop/queue/q", "batch", "1e400"),
    ("/api/v1/pop/queue/q", "timeout", "99999999999"),
    ("/api/v1/pop/queue/q", "consumerGroup", "null\x00"),
    ("/api/v1/pop/queue/q", "timeout", "null"),
])
async def test_absurd_query_parameters_are_400s_naming_them(
        http: httpx.AsyncClient, path: str, param: str, value: str) -> None:
    r = await http.get(path, params={param: value})
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith(param + " "), r.text


# --- connections -----------------------------------------------------------------------

MIB = 1024 * 1024


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/api/v1/messages/1/x/retry"),
    ("DELETE", "/api/v1/resources/queues/{queue}"),
    ("DELETE", "/api/v1/consumer-groups/g"),
    ("DELETE", "/api/v1/messages/1/x"),
    ("GET", "/health"),
    ("GET", "/api/v1/pop/queue/{queue}"),
    ("POST", "/api/v1/no-such-route"),
    ("PUT", "/api/v1/push"),
])
async def test_an_unneeded_body_never_wedges_the_next_request_on_the_connection(
        broker: BrokerProcess, queue_name: str, method: str, path: str) -> None:
    first = (f"{method} {path.format(queue=queue_name)} HTTP/1.1\r\nHost: t\r\n"
             f"Content-Length: {MIB}\r\n\r\n").encode() + b"x" * MIB
    second = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
    answers = raw_exchange(broker.url, first + second, answers=2, timeout=10)
    assert len(answers) == 2, answers
    assert status_of(answers[0]) < 500
    assert status_of(answers[1]) == 200 and body_of(answers[1])["status"] == "healthy"


@pytest.fixture(scope="module")
def logged_broker(database_url: str, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[BrokerProcess, Path]]:
    log = tmp_path_factory.mktemp("edge") / "broker.log"
    with BrokerProcess(database_url, workers=1, log_path=log) as proc:
        yield proc, log


async def test_a_body_shorter_than_its_length_is_a_quiet_400(
        logged_broker: tuple[BrokerProcess, Path], db: asyncpg.Connection,
        queue_name: str) -> None:
    proc, log = logged_broker
    body = json.dumps({"items": [{"queue": queue_name, "payload": 1}]}).encode()
    head = (f"POST /api/v1/push HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body) + 50}\r\n\r\n").encode()
    [answer] = raw_exchange(proc.url, head + body, half_close=True)
    # Whoever notices first answers: the server (h11 sees the stream end: broker/malformed.py
    # names it) or the route reading the body. Either way a 400 naming the early end, and the
    # connection closes.
    assert status_of(answer) == 400, answer
    assert b"connection: close" in answer.lower()
    error = body_of(answer)["error"]
    if error.startswith("malformed HTTP request: "):
        # h11's words: "peer closed connection without sending complete message body
        # (received 54 bytes, expected 104)".
        assert f"received {len(body)} bytes" in error, error
    else:
        assert error == f"request body ended after {len(body)} bytes, before its end", answer
    # A client that vanishes mid-body (no half-close, just gone) is not an error either.
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", proc.port)) as sock:
            sock.sendall(head + body[:10])
    async with httpx.AsyncClient(base_url=proc.url) as client:
        assert (await client.get("/health")).status_code == 200
    assert await queue_counts(db, queue_name) == NOTHING
    text = log.read_text()
    assert "Traceback" not in text and "Error in ASGI" not in text, text[-3000:]


async def test_path_tricks_never_reach_a_handler_as_names(broker: BrokerProcess) -> None:
    cases = {
        "GET /api/v1/pop/queue/.. HTTP/1.1": 400,
        "GET /api/v1/pop/queue/%2E HTTP/1.1": 400,
        "GET /api/v1/pop/queue/a%2Fb HTTP/1.1": 404,  # a/b: no such route
        "GET /api/v1/pop/queue/a%00b HTTP/1.1": 400,
        "GET /api/v1/pop/queue/a%25b HTTP/1.1": 400,
        "DELETE /api/v1/resources/queues/a%5Cb HTTP/1.1": 400,
        "DELETE /api/v1/consumer-groups/%C2%85 HTTP/1.1": 400,
        "GET /api/v1/resources/queues/../../health HTTP/1.1": 404,
    }
    for line, expected in cases.items():
        [answer] = raw_exchange(broker.url, f"{line}\r\nHost: t\r\n\r\n".encode())
        assert status_of(answer) == expected, (line, answer[:300])
        assert "error" in body_of(answer)


# --- the name rule ---------------------------------------------------------------------

REFUSED_NAMES = [
    ("", "must not be empty"), ("a/b", "must not contain '/'"),
    ("a\\b", "must not contain '\\\\'"), ("a?b", "must not contain '?'"),
    ("a#b", "must not contain '#'"), ("50%", "must not contain '%'"),
    (".", "must not be '.'"), ("..", "must not be '..'"),
    ("a\x85b", "contains control characters"), ("a\x9bb", "contains control characters"),
    ("a\x00b", "contains control characters"), ("x" * 256, "is longer than 255 bytes"),
]


@pytest.mark.parametrize(("name", "reason"), REFUSED_NAMES,
                         ids=[repr(n[:8]) for n, _ in REFUSED_NAMES])
async def test_names_that_could_not_be_addressed_are_refused_naming_the_field(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, name: str,
        reason: str) -> None:
    answers = {
        "items[0].queue": await http.post("/api/v1/push", json={"items": [
            {"queue": name, "payload": 1}]}),
        "items[0].partition": await http.post("/api/v1/push", json={"items": [
            {"queue": queue_name, "partition": name or "/", "payload": 1}]}),
        "queue": await http.post("/api/v1/configure", json={"queue": name}),
        "namespace": await http.post("/api/v1/configure",
                                     json={"queue": queue_name, "namespace": name or "/"}),
        "consumerGroup": await http.get(f"/api/v1/pop/queue/{queue_name}",
                                        params={"consumerGroup": name}),
        "task": await http.get("/api/v1/pop", params={"task": name}),
        "acknowledgments[0].consumerGroup": await http.post("/api/v1/ack/batch", json={
            "acknowledgments": [{"transactionId": "t", "partitionId": "1",
                                 "consumerGroup": name}]}),
    }
    for field, r in answers.items():
        if name == "" and field in ("consumerGroup",
                                    "task", "acknowledgments[0].consumerGroup"):
            continue  # empty means the default there (Default, none, __QUEUE_MODE__)
        assert r.status_code == 400, (field, r.text)
        error = r.json()["error"]
        why = reason
        if field in ("items[0].partition", "namespace") and name == "":
            why = "must not contain '/'"  # empty means Default / none there: "/" was sent
        assert error == f"{field} {why}", (field, error)
    if "\x00" not in name:  # PostgreSQL text cannot even hold the name to look it up
        assert await queue_counts(db, name) == NOTHING
    assert await queue_counts(db, queue_name) == NOTHING


ADDRESSABLE = ["a b", "ü名前", "x+y", "a;b", "a=b&c", "'; DROP TABLE queen.queues; --",
               "..x", ".x", "x.", "a:b@c", "*", "~tilde", "null", "(){}[]<>|^`\"$!",
               "é" * 127]


@pytest.mark.parametrize("name", ADDRESSABLE)
async def test_an_accepted_name_is_addressable_through_every_route_that_takes_it(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, name: str) -> None:
    queue, partition, group = f"{queue_name}.{name[:40]}", name, name
    enc = {k: quote(v, safe="") for k, v in (("q", queue), ("p", partition), ("g", group))}
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": partition, "payload": name, "transactionId": "t"}]})
    assert r.status_code == 201 and r.json()[0]["status"] == "queued", r.text
    # The official client puts raw names into pop paths; httpx encodes what it must.
    r = await http.get(f"/api/v1/pop/queue/{queue}/partition/{partition}",
                       params={"consumerGroup": group})
    assert r.status_code == 200, r.text
    [message] = r.json()["messages"]
    assert (message["data"], message["partition"], message["consumerGroup"]) == (
        name, partition, group)
    r = await http.post("/api/v1/ack", json={
        "transactionId": "t", "partitionId": message["partitionId"],
        "leaseId": message["leaseId"], "consumerGroup": group})
    assert r.json()[0]["success"] is True
    row = await cursor_row(db, queue, group, partition)
    assert row is not None and row["committed"] == 0
    # Admin routes percent-encode names.
    r = await http.get(f"/api/v1/resources/queues/{enc['q']}/depth", params={"group": group})
    assert r.json()["queue"] == queue and r.json()["pending"] == 0
    r = await http.get(f"/api/v1/consumer-groups/{enc['g']}")
    assert list(r.json()) == [queue]
    r = await http.post(f"/api/v1/consumer-groups/{enc['g']}/queues/{enc['q']}/partitions/"
                        f"{enc['p']}/seek", json={"timestamp": "2000-01-01T00:00:00Z"})
    assert r.json()["cursorMovedTo"] == -1, r.text
    r = await http.delete(f"/api/v1/consumer-groups/{enc['g']}/queues/{enc['q']}")
    assert r.json()["deletedPartitions"] == 1, r.text
    r = await http.delete(f"/api/v1/resources/queues/{enc['q']}")
    assert r.json()["existed"] is True, r.text
    assert await queue_counts(db, queue) == NOTHING


# --- the OpenAPI document --------------------------------------------------------------

async def test_openapi_document_is_valid_and_covers_every_route(
        http: httpx.AsyncClient) -> None:
    from openapi_spec_validator import validate
    from starlette.routing import Route

    from broker.app import create_app
    from broker.table import ENDPOINTS
    from core.settings import Settings

    r = await http.get("/openapi.json")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    document = r.json()
    validate(document)  # raises on anything that is not OpenAPI 3.1
    assert document["openapi"] == "3.1.0"
    documented = {(method.upper(), path) for path, ops in document["paths"].items()
                  for method in ops}
    served = set()
    for route in create_app(Settings.from_env({})).routes:
        assert isinstance(route, Route) and route.methods
        path = route.path.replace(":path}", "}")
        served |= {(m, path) for m in route.methods if m != "HEAD"}
    assert documented == served
    assert len(served) == len(ENDPOINTS)


async def test_docs_page_is_self_contained(http: httpx.AsyncClient) -> None:
    r = await http.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert "openapi.json" in page
    for marker in ("http://", "https://", "<link", "<script src", "@import"):
        assert marker not in page, marker
