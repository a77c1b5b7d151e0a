"""`GET /health` (§6.5): 200 when the database answers, 503 otherwise."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.http import json_response
from broker.wire.resources import Health

try:
    VERSION = version("queen-broker")
except PackageNotFoundError:  # running from a source tree that was not installed
    VERSION = "0.0.0"


async def health(request: Request) -> Response:
    if await broker_of(request).healthy():
        return json_response(Health("healthy", "connected", VERSION))
    return json_response(Health("unhealthy", "disconnected", VERSION), 503,
                         headers={"Retry-After": "2"})
