"""`GET /health` (§6.5): 200 when the database answers, 503 otherwise."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.state import state_of
from broker.wire import json_response

try:
    VERSION = version("queen-broker")
except PackageNotFoundError:  # running from a source tree that was not installed
    VERSION = "0.0.0"


async def health(request: Request) -> Response:
    state = state_of(request)
    if await state.db.ping():
        return json_response({"status": "healthy", "database": "connected",
                              "version": VERSION})
    return json_response({"status": "unhealthy", "database": "disconnected",
                          "version": VERSION}, 503, headers={"Retry-After": "2"})


routes = [Route("/health", health, methods=["GET"])]
