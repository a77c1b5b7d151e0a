"""Request and response bodies: msgspec structs, decoders built once, validation helpers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from core.errors import BadRequest, PayloadTooLarge

T = TypeVar("T")
MAX_NAME_BYTES = 255
_CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f]")
MAX_TRANSACTION_ID_BYTES = 65535

_encoder = msgspec.json.Encoder()


def json_response(content: Any, status: int = 200, *,
                  headers: Mapping[str, str] | None = None) -> Response:
    return Response(_encoder.encode(content), status, headers=dict(headers or {}),
                    media_type="application/json")


def no_content() -> Response:
    return Response(status_code=204)


# How much of an over-limit body is still read (and dropped) before answering 413. Answering
# and closing while the client is still sending makes the kernel reset the connection, and
# the client then sees a network error instead of the 413; a bounded drain avoids that for
# bodies modestly over the limit without letting a huge one tie the worker up.
DRAIN_BYTES = 1024 * 1024


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing (413) anything over `limit` bytes without keeping it."""
    refusal: str | None = None
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        refusal = f"body of {declared} bytes is over the limit of {limit} bytes"
        if int(declared) > limit + DRAIN_BYTES:
            raise PayloadTooLarge(refusal)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if refusal is None and size > limit:
            refusal = f"body is over the limit of {limit} bytes"
        if refusal is None:
            chunks.append(chunk)
        elif size > limit + DRAIN_BYTES:
            break
    if refusal is not None:
        raise PayloadTooLarge(refusal)
    return b"".join(chunks)


def decode(body: bytes, kind: type[T], decoder: msgspec.json.Decoder[T] | None = None) -> T:
    """Decode a JSON body into `kind`; an empty body counts as `{}` (wire-protocol §1)."""
    try:
        if decoder is not None:
            return decoder.decode(body or b"{}")
        return msgspec.json.decode(body or b"{}", type=kind)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"bad body: {exc}") from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"bad body: {exc}") from None
    except RecursionError:
        # msgspec walks nested arrays/objects recursively, even inside a Raw payload.
        raise BadRequest("bad body: JSON is nested too deeply") from None


def decode_object(body: bytes) -> dict[str, Any]:
    value = decode(body, dict)
    return value


def check_name(value: object, what: str, *, required: bool = True,
               max_bytes: int = MAX_NAME_BYTES, allow_empty: bool = True) -> str:
    """A queue/partition/group/namespace/task name: a string, no control characters, short."""
    if not isinstance(value, str):
        raise BadRequest(f"{what} is required" if value is None and required
                         else f"{what} must be a string")
    if not allow_empty and value == "":
        raise BadRequest(f"{what} must not be empty")
    if len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise BadRequest(f"{what} is longer than {max_bytes} bytes")
    if _CONTROL_CHARACTERS.search(value):
        raise BadRequest(f"{what} contains control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{what} is not valid UTF-8") from None
    return value


def query_int(request: Request, name: str, default: int, *, low: int = 0,
              high: int | None = None) -> int:
    """A non-negative integer query parameter; absent or empty means the default."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {raw!r}") from None
    if value < low:
        raise BadRequest(f"{name} must be at least {low}, got {value}")
    if high is not None and value > high:
        raise BadRequest(f"{name} must be at most {high}, got {value}")
    return value


def query_bool(request: Request, name: str, default: bool) -> bool:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise BadRequest(f"{name} must be true or false, got {raw!r}")


# --- push -------------------------------------------------------------------------------

class PushItemIn(msgspec.Struct, rename={"transaction_id": "transactionId",
                                          "trace_id": "traceId"}):
    queue: Any = None
    partition: Any = None
    payload: msgspec.Raw = msgspec.Raw(b"")
    data: msgspec.Raw = msgspec.Raw(b"")
    transaction_id: Any = None
    trace_id: Any = None


class PushBody(msgspec.Struct):
    items: list[PushItemIn] | None = None


PUSH_DECODER = msgspec.json.Decoder(PushBody)
