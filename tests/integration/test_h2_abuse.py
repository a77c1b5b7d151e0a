"""HTTP/2 clients that misbehave on purpose, against a real TLS broker (one web worker).

- A client that never opens its flow-control window gets its stalled answer reset after
  KEEP_ALIVE_TIMEOUT_SECONDS (broker/stalled_h2.py); the connection goes on.
- Rapid reset (CVE-2023-44487): hypercorn sends GOAWAY after `keep_alive_max_requests`
  (1000) streams on one connection and closes it at the next frame, so a client that opens
  and resets streams in a loop must reconnect; asserted so a later hypercorn or a config
  change that drops the limit is noticed.
"""

from __future__ import annotations

import socket
import ssl
import time
import uuid
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import hpack
import httpx
import pytest
from hyperframe.frame import HeadersFrame, RstStreamFrame

from tests.certs import TestPki
from tests.support import BrokerProcess

STALL_SECONDS = 2  # the broker's KEEP_ALIVE_TIMEOUT_SECONDS here


@pytest.fixture(scope="module")
def h2_broker(database_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[BrokerProcess, TestPki]]:
    pki = TestPki(tmp_path_factory.mktemp("pki"))
    with BrokerProcess(database_url, workers=1, tls=pki.client_context(), env=pki.env(
            KEEP_ALIVE_TIMEOUT_SECONDS=str(STALL_SECONDS))) as proc:
        yield proc, pki


def _h2_socket(broker: BrokerProcess, pki: TestPki) -> ssl.SSLSocket:
    context = pki.client_context()
    context.set_alpn_protocols(["h2"])
    tls = context.wrap_socket(socket.create_connection(("127.0.0.1", broker.port)),
                              server_hostname="127.0.0.1")
    assert tls.selected_alpn_protocol() == "h2"
    return tls


def _request(method: str, path: str) -> list[tuple[bytes, bytes]]:
    return [(b":method", method.encode()), (b":path", path.encode()),
            (b":scheme", b"https"), (b":authority", b"127.0.0.1")]


def _events_until(tls: ssl.SSLSocket, conn: h2.connection.H2Connection, wanted: type,
                  seconds: float) -> list[h2.events.Event]:
    """Events read until one of type `wanted` arrives, the server closes, or `seconds`."""
    deadline = time.monotonic() + seconds
    events: list[h2.events.Event] = []
    while (left := deadline - time.monotonic()) > 0:
        tls.settimeout(left)
        try:
            data = tls.recv(65536)
        except TimeoutError:
            break
        if not data:
            break
        events += conn.receive_data(data)
        tls.sendall(conn.data_to_send())
        if any(isinstance(event, wanted) for event in events):
            break
    return events


def test_an_answer_the_client_never_lets_through_is_reset_and_the_connection_goes_on(
        h2_broker: tuple[BrokerProcess, TestPki]) -> None:
    broker, pki = h2_broker
    queue = f"stall-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=broker.url, verify=pki.client_context()) as client:
        r = client.post("/api/v1/push", json={"items": [{"queue": queue, "payload": "x"}]})
        assert r.status_code == 201, r.text
    with _h2_socket(broker, pki) as tls:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(header_encoding=None))
        conn.initiate_connection()
        # A window of 0: not one byte of any answer's body may be sent.
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, _request("GET", f"/api/v1/pop/queue/{queue}?wait=false"),
                          end_stream=True)
        tls.sendall(conn.data_to_send())
        started = time.monotonic()
        events = _events_until(tls, conn, h2.events.StreamReset, STALL_SECONDS + 4)
        waited = time.monotonic() - started
        # The head is not flow-controlled: it comes at once; the body never could.
        assert [dict(e.headers)[b":status"] for e in events
                if isinstance(e, h2.events.ResponseReceived)] == [b"200"]
        assert not [e for e in events if isinstance(e, h2.events.DataReceived)]
        [reset] = [e for e in events if isinstance(e, h2.events.StreamReset)]
        assert (reset.stream_id, reset.error_code) == (stream, h2.errors.ErrorCodes.CANCEL)
        assert STALL_SECONDS - 0.5 < waited < STALL_SECONDS + 3
        # The connection still serves: a request whose answer has no body.
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 65535})
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, _request("GET", "/health"), end_stream=True)
        tls.sendall(conn.data_to_send())
        events = _events_until(tls, conn, h2.events.StreamEnded, 5)
        assert any(isinstance(e, h2.events.StreamEnded) and e.stream_id == stream
                   for e in events), events


def test_a_client_resetting_every_stream_it_opens_is_sent_away_after_1000(
        h2_broker: tuple[BrokerProcess, TestPki]) -> None:
    broker, pki = h2_broker
    encoder = hpack.Encoder()
    sent = 0
    with _h2_socket(broker, pki) as tls:
        # The preface and SETTINGS from h2; then raw frames, which h2 would not send once
        # it has seen the server's GOAWAY.
        conn = h2.connection.H2Connection()
        conn.initiate_connection()
        tls.sendall(conn.data_to_send())
        deadline = time.monotonic() + 10
        with pytest.raises(OSError):  # refused once the server has closed the connection
            while time.monotonic() < deadline:
                batch = bytearray()
                for _ in range(50):
                    stream = 1 + 2 * sent
                    headers = HeadersFrame(stream)
                    headers.data = encoder.encode(_request("GET", "/health"))
                    headers.flags.add("END_HEADERS")
                    headers.flags.add("END_STREAM")
                    reset = RstStreamFrame(stream)
                    reset.error_code = h2.errors.ErrorCodes.CANCEL
                    batch += headers.serialize() + reset.serialize()
                    sent += 1
                tls.sendall(bytes(batch))
                tls.settimeout(0.005)
                try:
                    if tls.recv(65536) == b"":
                        raise ConnectionResetError("closed by the server")
                except TimeoutError:
                    pass
    # What the client had sent by the time it noticed; the server stopped well before.
    assert sent < 20_000
