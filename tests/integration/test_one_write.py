"""Each HTTP/1.1 answer reaches the client as one TCP segment, head and body together
(broker/one_write.py), counted by the client's kernel (TCP_INFO), on a real `serve`."""

from __future__ import annotations

import json
import socket
import struct

from tests.served import Served

# struct tcp_info (linux/tcp.h): tcpi_data_segs_in, segments that carried data, at byte 152.
_DATA_SEGS_IN = struct.Struct("=I")
_DATA_SEGS_IN_OFFSET = 152


def _data_segments_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return int(_DATA_SEGS_IN.unpack_from(info, _DATA_SEGS_IN_OFFSET)[0])


def _exchange(sock: socket.socket, request: bytes) -> tuple[bytes, bytes]:
    """Send one request; read its whole answer (by Content-Length): (head, body)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0 if request.startswith(b"HEAD ") else next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
         if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        body += chunk
    return head, body


def _request(method: str, path: str, body: bytes = b"") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def test_each_answer_arrives_as_one_segment_and_an_interim_100_is_not_held(
        served: Served, queue_name: str) -> None:
    host, port = "127.0.0.1", served.port
    push = json.dumps({"items": [{"queue": queue_name, "partition": "p",
                                  "payload": {"n": n, "pad": "x" * 200}}
                                 for n in range(20)]}).encode()
    with socket.create_connection((host, port), timeout=10) as sock:
        answers = [
            _exchange(sock, _request("GET", "/health")),
            _exchange(sock, _request("POST", "/api/v1/push", push)),
            _exchange(sock, _request("GET", f"/api/v1/pop/queue/{queue_name}?batch=20")),
            _exchange(sock, _request("GET", "/api/v1/no-such-route")),
            # No body: the head leaves with the answer's (empty) end.
            _exchange(sock, _request("GET", f"/api/v1/pop/queue/{queue_name}?wait=false")),
            _exchange(sock, _request("HEAD", "/health")),
        ]
        statuses = [head.split(b" ", 2)[1] for head, _ in answers]
        assert statuses == [b"200", b"201", b"200", b"404", b"204", b"200"], answers
        assert len(json.loads(answers[2][1])["messages"]) == 20
        # Four answers, four segments: before, each answer was two (head, then body).
        assert _data_segments_in(sock) == len(answers)

    # An interim head is not held: the client waits for it before it sends the body.
    push = json.dumps({"items": [{"queue": queue_name, "payload": {"n": 1}}]}).encode()
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(_request("POST", "/api/v1/push", push).replace(
            b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n", 1)[: -len(push)])
        interim = sock.recv(65536)  # times out (5 s) if the 100 were held
        assert interim.startswith(b"HTTP/1.1 100 "), interim
        sock.sendall(push)
        head, _ = _exchange(sock, b"")
        assert head.split(b" ", 2)[1] == b"201"
