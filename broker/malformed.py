"""A request whose HTTP/1.1 framing is malformed is refused with a body that names the fault.

hypercorn answers such a request itself (h11 refuses it before any route runs: a header
line without a colon, a chunk size that is not hexadecimal, a Content-Length that is not a
number, no Host header, a head larger than `h11_max_incomplete_size`) with 400 or 431, an
empty body and `Connection: close`. The status is right; the client learns nothing of what
was wrong. `NamingH11Protocol` keeps hypercorn's answer, status and close, and adds the
broker's error body (`{"error": "..."}`) with h11's own words for the fault. It also
refuses what h11 accepts but a proxy in front could read otherwise: a request framed by both
Content-Length and Transfer-Encoding.

`install()` makes hypercorn's connections use it; `broker/worker.py` calls it once, before
it serves. It relies on two things of hypercorn's HTTP/1.1 protocol class: the h11
connection it keeps as `connection`, and `_send_error_response(status)`, which is where it
answers a refused request. tests/integration/test_malformed_http.py fails if a later
hypercorn changes either.
"""

from __future__ import annotations

import re
from itertools import chain
from typing import Any

import h11
import hypercorn.protocol
import msgspec
from hypercorn.protocol.h11 import H11Protocol

# The words of h11's refusal kept in the answer: enough to name the fault, not an echo of a
# large malformed head.
MAX_REASON_CHARS = 200
_BYTES_REPR = re.compile(r"""bytearray\(b(['"])(.*?)\1\)""")


class RememberingConnection(h11.Connection):
    """An h11 server connection that keeps the words of the last refusal it raised."""

    refusal: str | None = None

    def next_event(self) -> Any:
        try:
            event = super().next_event()
            if isinstance(event, h11.Request):
                refuse_ambiguous_framing(event)
            return event
        except h11.RemoteProtocolError as exc:
            # h11 quotes the offending bytes as a Python repr (bytearray(b'...')).
            words = _BYTES_REPR.sub(r"'\2'", str(exc)) or type(exc).__name__
            self.refusal = words[:MAX_REASON_CHARS]
            raise


def refuse_ambiguous_framing(request: h11.Request) -> None:
    """Refuse a request that carries both Content-Length and Transfer-Encoding.

    h11 reads such a body as chunked and keeps the connection open. A proxy in front that
    trusts Content-Length instead would see a different end of the body, and what follows
    it on the connection as a request of its own (request smuggling). RFC 9112 §6.3 lets a
    server refuse such a request and requires it to close the connection either way;
    hypercorn closes after a refusal.
    """
    names = {name for name, _ in request.headers}
    if b"content-length" in names and b"transfer-encoding" in names:
        raise h11.RemoteProtocolError(
            "both Content-Length and Transfer-Encoding: send one", error_status_hint=400)


def refusal_text(status: int, reason: str | None, max_head_bytes: int) -> str:
    """What the answer's `error` says about a request h11 refused with `status`."""
    if status == 431:
        return f"request head larger than {max_head_bytes} bytes"
    # Not "HTTP/1.1" in the text: a client that looks for the status line by that string
    # would find a second one in the body.
    return f"malformed HTTP request: {reason or 'refused by the HTTP parser'}"


class NamingH11Protocol(H11Protocol):
    """hypercorn's HTTP/1.1 protocol, whose refusals of malformed requests carry a body."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection = RememberingConnection(
            h11.SERVER, max_incomplete_event_size=self.config.h11_max_incomplete_size)

    async def _send_error_response(self, status_code: int) -> None:
        reason = getattr(self.connection, "refusal", None)
        body = msgspec.json.encode({"error": refusal_text(
            status_code, reason, self.config.h11_max_incomplete_size)})
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        await self._send_h11_event(h11.Response(
            status_code=status_code,
            headers=list(chain(headers, self.config.response_headers("h11")))))
        await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())


def install() -> None:
    """Make the connections hypercorn serves from now on use `NamingH11Protocol`."""
    hypercorn.protocol.H11Protocol = NamingH11Protocol  # type: ignore[attr-defined]
