"""CORS: which browser pages on other origins may call the API (`CORS_ORIGINS`, default `*`).

- A preflight (any `OPTIONS` request) is answered here, before routing and before auth (a
  browser sends no token with it): 204 with `Access-Control-Allow-Origin` (`*` when any origin
  is allowed, else the caller's origin), `-Allow-Methods` (every method the broker serves),
  `-Allow-Headers: Authorization, Content-Type` and `-Max-Age`. From an origin that is not
  allowed: 403 `{"error"}`.
- Every other answer to a request from an allowed `Origin` carries
  `Access-Control-Allow-Origin` (plus `Vary: Origin` when it names the origin) and exposes
  `Retry-After`, so a page can read errors and back off. An origin that is not allowed gets no
  CORS headers: the browser keeps the answer from the page. Requests without `Origin`
  (clients that are not browsers) are untouched.

Bearer tokens are not ambient credentials (unlike cookies), so no
`Access-Control-Allow-Credentials` is needed or sent.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from broker.errors import drained
from broker.wire.http import json_response

ALLOW_METHODS = "GET, HEAD, POST, DELETE, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type"
MAX_AGE_SECONDS = 3600


class Cors:
    """ASGI middleware answering preflights and labelling answers for allowed origins."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self._app = app
        self._any = "*" in origins
        self._origins = frozenset(origins)

    def allowed(self, origin: str | None) -> str | None:
        """The `Access-Control-Allow-Origin` value for this origin; None: not allowed."""
        if self._any:
            return "*"
        return origin if origin in self._origins else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        origin = _header(scope, b"origin")
        if scope["method"] == "OPTIONS":
            await self._preflight(origin, scope, receive, send)
            return
        allowed = self.allowed(origin) if origin is not None else None
        if allowed is None:
            await self._app(scope, receive, send)
            return
        extra = [(b"access-control-allow-origin", allowed.encode("latin-1")),
                 (b"access-control-expose-headers", b"Retry-After")]
        if allowed != "*":
            extra.append((b"vary", b"Origin"))

        async def send_labelled(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self._app(scope, receive, send_labelled)

    async def _preflight(self, origin: str | None, scope: Scope, receive: Receive,
                         send: Send) -> None:
        complete = await drained(Request(scope, receive))
        allowed = self.allowed(origin)
        response: Response
        if origin is not None and allowed is None:
            response = json_response(
                {"error": f"origin {origin[:200]!r} is not allowed (CORS_ORIGINS)"}, 403)
        else:
            headers = {"Access-Control-Allow-Methods": ALLOW_METHODS,
                       "Access-Control-Allow-Headers": ALLOW_HEADERS,
                       "Access-Control-Max-Age": str(MAX_AGE_SECONDS)}
            if allowed is not None:
                headers["Access-Control-Allow-Origin"] = allowed
                if allowed != "*":
                    headers["Vary"] = "Origin"
            response = Response(status_code=204, headers=headers)
        if not complete:
            response.headers["Connection"] = "close"
        await response(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None
