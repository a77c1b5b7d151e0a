"""The apps `python -m loadtest probe http_stack` serves with hypercorn: nothing of the
broker behind them, so what they cost is the HTTP stack's.

* `asgi`: a bare ASGI app: reads the request's body to its end, answers a constant;
* `starlette`: the same answer from a starlette route (its Request, routing and Response).

The third variant of the probe is the L-HTTP null app (loadtest/null_app.py).
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

# About what the broker answers a push of a few items.
ANSWER = b"[" + b",".join([b'{"index":0,"status":"queued"}'] * 10) + b"]"
_HEADERS = [(b"content-type", b"application/json"),
            (b"content-length", str(len(ANSWER)).encode())]


async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 201, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": ANSWER})


async def _push(request: Request) -> Response:
    await request.body()
    return Response(ANSWER, 201, media_type="application/json")


starlette = Starlette(routes=[Route("/api/v1/push", _push, methods=["POST"])])
