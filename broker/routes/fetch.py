"""`POST /api/v1/fetch`: offset reads with no lease and no cursor (§6.6)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.state import state_of
from broker.wire import check_name, decode_object, json_response, read_body
from core.errors import BadRequest
from core.fetch import FetchResult, fetch_entry
from core.partitions import DEFAULT_PARTITION
from core.timefmt import iso

MAX_ENTRIES = 1024
DEFAULT_MAX_BYTES = 1024 * 1024
MAX_MAX_BYTES = 8 * 1024 * 1024
MAX_WAIT_MS = 30000


def _int(value: Any, what: str, default: int, low: int, high: int | None = None) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{what} must be an integer")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise BadRequest(f"{what} must be {bound}, got {value}")
    return value


def _entry_args(index: int, entry: Any) -> dict[str, Any]:
    where = f"entries[{index}]"
    if not isinstance(entry, dict):
        raise BadRequest(f"{where} must be an object")
    if entry.get("queue") is None:
        raise BadRequest(f"{where}.queue is required")
    partition = entry.get("partition", DEFAULT_PARTITION)
    if isinstance(partition, int) and not isinstance(partition, bool):
        partition = str(partition)
    return {
        "queue": check_name(entry["queue"], f"{where}.queue"),
        "partition": check_name(partition, f"{where}.partition") or DEFAULT_PARTITION,
        "offset": _int(entry.get("offset"), f"{where}.offset", 0, 0),
        "max_bytes": _int(entry.get("maxBytes"), f"{where}.maxBytes", DEFAULT_MAX_BYTES, 1,
                          MAX_MAX_BYTES),
    }


def _entry_json(result: FetchResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "queue": result.queue,
        "partition": result.partition,
        "records": [{"offset": r.offset, "transactionId": r.transaction_id,
                     "payload": msgspec.Raw(r.payload), "ts": iso(r.created_at)}
                    for r in result.records],
        "highWatermark": result.high_watermark,
        "logStartOffset": result.log_start,
    }
    if result.error:
        out["error"] = result.error
    return out


async def fetch(request: Request) -> Response:
    state = state_of(request)
    body = decode_object(await read_body(request, state.settings.max_body_bytes))
    entries = body.get("entries")
    if not isinstance(entries, list):
        raise BadRequest("entries array is required")
    if len(entries) > MAX_ENTRIES:
        raise BadRequest(f"{len(entries)} entries is over the limit of {MAX_ENTRIES}")
    wanted = [_entry_args(i, e) for i, e in enumerate(entries)]
    max_wait_ms = _int(body.get("maxWaitMs"), "maxWaitMs", 0, 0, MAX_WAIT_MS)
    budget = _int(body.get("maxBytes"), "maxBytes", MAX_MAX_BYTES, 1, 64 * MAX_MAX_BYTES)
    deadline = time.monotonic() + max_wait_ms / 1000
    delay = 0.05
    while True:
        results = []
        remaining = budget
        for args in wanted:
            result = await fetch_entry(state.db, **{**args,
                                                    "max_bytes": min(args["max_bytes"], remaining)})
            remaining -= sum(len(r.payload) for r in result.records)
            results.append(result)
        if any(r.records or r.error for r in results) or time.monotonic() >= deadline:
            break
        # Nothing yet and the caller is willing to wait: poll with a short backoff.
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.5)
    return json_response({"entries": [_entry_json(r) for r in results]})


routes = [Route("/api/v1/fetch", fetch, methods=["POST"])]
