"""A request with malformed HTTP/1.1 framing gets a 4xx whose body names the fault, the
connection closes, and nothing is written (broker/malformed.py), on a real broker process."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from tests.support import BrokerProcess


def _answer(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes; read until the server closes: (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip()
               for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def _push_head(queue: str, extra: str) -> bytes:
    return (f"POST /api/v1/push HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\n{extra}\r\n").encode()


@pytest.mark.parametrize(("request_bytes", "status", "words"), [
    pytest.param(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nNot a header\r\n\r\n",
                 400, "header", id="header-line-without-colon"),
    pytest.param(b"GET /health HTTP/1.1\r\n\r\n", 400, "Host", id="no-host"),
    pytest.param(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ten\r\n\r\n",
                 400, "Content-Length", id="content-length-not-a-number"),
    pytest.param(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 70_000
                 + b"\r\n\r\n", 431, "larger than", id="head-too-large"),
    pytest.param(b"NOT-HTTP\r\n\r\n", 400, "request line", id="no-request-line"),
])
def test_a_malformed_head_is_refused_naming_the_fault(
        broker: BrokerProcess, request_bytes: bytes, status: int, words: str) -> None:
    got, headers, body = _answer(broker.port, request_bytes)
    assert got == status
    assert headers["connection"] == "close"
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert words.lower() in error.lower(), error
    # One status line: a client that finds answers by "HTTP/1.1 " must not find one here.
    assert b"HTTP/1.1 " not in body


def test_a_bad_chunk_in_a_push_body_is_refused_naming_it_and_writes_nothing(
        broker: BrokerProcess, queue_name: str) -> None:
    # The head is well formed, so the route starts; the body's first chunk size is not
    # hexadecimal. The push must not be written, and the answer says why.
    item = json.dumps({"items": [{"queue": queue_name, "payload": {"n": 1}}]}).encode()
    request = (_push_head(queue_name, "Transfer-Encoding: chunked\r\n")
               + b"ZZ\r\n" + item + b"\r\n0\r\n\r\n")
    got, headers, body = _answer(broker.port, request)
    assert got == 400
    assert headers["connection"] == "close"
    assert "chunk" in json.loads(body)["error"].lower()
    with httpx.Client(base_url=broker.url, timeout=10) as http:
        popped = http.get(f"/api/v1/pop/queue/{queue_name}", params={"wait": "false"})
        assert popped.status_code == 204, popped.text
        # The broker goes on serving well-formed requests.
        assert http.get("/health").status_code == 200


def test_a_push_framed_both_by_length_and_by_chunks_is_refused_and_writes_nothing(
        broker: BrokerProcess, queue_name: str) -> None:
    # A proxy that trusts Content-Length would end this body where the server, reading it
    # as chunked, does not: the bytes after it would be smuggled in as a second request.
    # The broker refuses the request, closes, and writes neither push.
    item = json.dumps({"items": [{"queue": queue_name, "payload": {"n": 1}}]}).encode()
    chunked = f"{len(item):x}\r\n".encode() + item + b"\r\n0\r\n\r\n"
    smuggled = (_push_head(queue_name, f"Content-Length: {len(item)}\r\n") + item)
    request = (_push_head(queue_name, f"Content-Length: {len(chunked)}\r\n"
                                      "Transfer-Encoding: chunked\r\n")
               + chunked + smuggled)
    got, headers, body = _answer(broker.port, request)
    assert got == 400, body
    assert headers["connection"] == "close"
    error = json.loads(body)["error"]
    assert "Content-Length" in error and "Transfer-Encoding" in error, error
    assert body.count(b"{") == 1, "one answer only: the smuggled request is not served"
    with httpx.Client(base_url=broker.url, timeout=10) as http:
        popped = http.get(f"/api/v1/pop/queue/{queue_name}", params={"wait": "false"})
        assert popped.status_code == 204, popped.text
