"""One table from core error classes to HTTP status, and the app's exception handlers."""

from __future__ import annotations

import asyncio
import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from broker.auth.errors import Forbidden, KeysUnavailable, Unauthenticated
from broker.state import state_of
from broker.wire.http import (
    DRAIN_BYTES,
    BodyEncodingUnsupported,
    BodyIncomplete,
    BodyRefused,
    BodyTimeout,
    json_response,
    read_body,
)
from core.errors import (
    BadRequest,
    ClientError,
    Coded,
    Limited,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    QueenError,
    QuotaExceeded,
    RateLimited,
    ServiceError,
    StorageError,
    StorageUnavailable,
)
from core.timers.ops import HorizonExceeded

log = logging.getLogger(__name__)

STATUS: dict[type[QueenError], int] = {
    Unauthenticated: 401,
    Forbidden: 403,
    HorizonExceeded: 403,
    QuotaExceeded: 403,
    RateLimited: 429,
    BodyTimeout: 408,
    BodyEncodingUnsupported: 415,
    BadRequest: 400,
    PayloadTooLarge: 413,
    NotFound: 404,
    ClientError: 400,
    Overloaded: 429,
    StorageUnavailable: 503,
    StorageError: 503,
    ServiceError: 503,
}


def status_for(exc: QueenError) -> int:
    return status_of(type(exc))


def status_of(kind: type[QueenError]) -> int:
    """The status of an error class: that of its nearest ancestor in STATUS, else 500."""
    for cls in kind.__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_response(exc: QueenError) -> Response:
    status = status_for(exc)
    headers = {}
    if isinstance(exc, ServiceError):
        headers["Retry-After"] = str(exc.retry_after_seconds)
    if isinstance(exc, Unauthenticated):
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, BodyRefused | BodyIncomplete | BodyTimeout):
        # Part of the body is still unread (or never came): the connection cannot carry
        # another request, so it closes after this answer.
        headers["Connection"] = "close"
    # A JWKS outage is logged once per failed fetch (broker.auth.jwks), not per request.
    if (status >= 500 or isinstance(exc, StorageError)) and not isinstance(
            exc, KeysUnavailable):
        # The driver's own words say why (connection refused, "too many clients already",
        # a timeout): the answer keeps them from the client, the log keeps them.
        cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
        log.warning("%s: %s%s", type(exc).__name__, exc.message, cause)
    if isinstance(exc, Limited):  # a tenant's quota: Queen's proxy's shape
        return json_response({"error": exc.message, "code": exc.code}, status,
                             headers=headers)
    if isinstance(exc, Coded):  # the extension routes' shape (§§14–17 shared rules)
        return json_response({"error": exc.code, "reason": exc.reason, "detail": exc.message},
                             status, headers=headers)
    return json_response({"error": exc.message}, status, headers=headers)


async def queen_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, QueenError)
    await held(request, exc)
    return error_response(exc)


async def refusal(request: Request, exc: QueenError) -> Response:
    """The error answer to a request refused before its body was read (401/403, 429)."""
    answer = error_response(exc)
    if not await drained(request):
        answer.headers["Connection"] = "close"
    await held(request, exc)
    return answer


async def held(request: Request, exc: QueenError) -> None:
    """Hold a tenant's 429 for QUEEN_TENANT_REFUSAL_DELAY_MS (core/tenancy/settings.py): a
    connection that sends again as soon as it is answered is then refused a few times a
    second, not as often as the broker can answer, and waiting costs a sleeping coroutine."""
    if isinstance(exc, RateLimited):
        delay = state_of(request).settings.tenancy.refusal_delay_ms
        if delay:
            await asyncio.sleep(delay / 1000)


async def drained(request: Request) -> bool:
    """Read and drop a body nobody will use, so it is not taken for the next request on the
    connection; False when it is too large (or broken) and the connection must close."""
    try:
        await read_body(request, DRAIN_BYTES)
    except QueenError:
        return False
    return True


async def http_error(request: Request, exc: Exception) -> Response:
    """404 and 405 come from the router, before any endpoint read the body: drain a small
    one here so it is not taken for the next request, and close the connection after a
    large one."""
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if not await drained(request):
        headers["Connection"] = "close"
    if exc.status_code == 404:
        text = f"no route for {request.method} {request.url.path}"
    elif exc.status_code == 405:
        text = f"method {request.method} is not allowed on {request.url.path}"
    else:
        text = str(exc.detail)
    return json_response({"error": text}, exc.status_code, headers=headers)


async def unexpected_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return json_response({"error": "internal error"}, 500)


HANDLERS = {
    QueenError: queen_error,
    HTTPException: http_error,
    Exception: unexpected_error,
}
