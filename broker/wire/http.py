"""Reading request bodies and writing JSON answers."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from core.errors import BadRequest, PayloadTooLarge


def _plain(value: Any) -> Any:
    """Checked wire scalars (`broker.wire.types`) are str subclasses: encode them as text."""
    if isinstance(value, str):
        return str(value)
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


_encoder = msgspec.json.Encoder(enc_hook=_plain)

# How much of an over-limit body is still read (and dropped) before answering 413. Answering
# and closing while the client is still sending makes the kernel reset the connection, and
# the client then sees a network error instead of the 413; a bounded drain avoids that for
# bodies modestly over the limit without letting a huge one tie the worker up.
DRAIN_BYTES = 1024 * 1024
# A client that announces a body and then stops sending it gets this long, then a 408.
BODY_TIMEOUT_SECONDS = 60.0


def json_response(content: Any, status: int = 200, *,
                  headers: Mapping[str, str] | None = None) -> Response:
    return Response(_encoder.encode(content), status, headers=dict(headers or {}),
                    media_type="application/json")


def no_content() -> Response:
    return Response(status_code=204)


class BodyIncomplete(BadRequest):
    """The request body ended before its announced length (the client went away)."""


class BodyTimeout(BadRequest):
    """The request body did not arrive in time."""


class BodyRefused(PayloadTooLarge):
    """A body over the limit that was not read to its end: the connection must close."""


class BodyEncodingUnsupported(BadRequest):
    """The body is sent compressed (or otherwise encoded), which the broker does not undo."""


async def read_body(request: Request, limit: int,
                    timeout: float = BODY_TIMEOUT_SECONDS) -> bytes:
    """The whole body, refusing (413) anything over `limit` bytes without keeping it.

    Every route reads its body through here, even one that ignores it, so no unread bytes
    are left on a kept-alive connection to be taken for the next request.
    """
    refusal: str | None = None
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        refusal = f"body of {declared} bytes is over the limit of {limit} bytes"
        if int(declared) > limit + DRAIN_BYTES:
            raise BodyRefused(refusal)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if refusal is None and size > limit:
                    refusal = f"body is over the limit of {limit} bytes"
                if refusal is None:
                    chunks.append(chunk)
                elif size > limit + DRAIN_BYTES:
                    raise BodyRefused(refusal)
    except ClientDisconnect:
        raise BodyIncomplete(f"request body ended after {size} bytes, before its end") \
            from None
    except TimeoutError:
        raise BodyTimeout(f"request body not received within {timeout:g} s") from None
    if refusal is not None:
        raise PayloadTooLarge(refusal)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity") and size:
        # Read to its end first (above), so the connection stays usable. Decoding it would
        # let a small compressed body grow past every limit once inflated.
        raise BodyEncodingUnsupported(
            f"Content-Encoding {encoding!r} is not supported: send the body uncompressed")
    return b"".join(chunks)
