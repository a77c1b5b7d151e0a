"""`POST /api/v1/fetch`: offset reads with no lease and no cursor (§6.6)."""

from __future__ import annotations

import asyncio
import time

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from broker.state import state_of
from broker.wire.fetch import (
    MAX_ENTRIES,
    FetchAnswer,
    FetchBody,
    FetchEntryOut,
    FetchRecord,
)
from broker.wire.http import json_response
from core.errors import BadRequest
from core.fetch import FetchResult, fetch_entry
from core.partitions import DEFAULT_PARTITION
from core.timefmt import iso


def _entry_json(result: FetchResult) -> FetchEntryOut:
    out = FetchEntryOut(
        result.queue, result.partition,
        [FetchRecord(r.offset, r.transaction_id, msgspec.Raw(r.payload), iso(r.created_at),
                     r.producer_sub) for r in result.records],
        result.high_watermark, result.log_start)
    if result.error:
        out.error = result.error
    return out


async def fetch(request: Request, body: FetchBody) -> Response:
    state = state_of(request)
    if len(body.entries) > MAX_ENTRIES:
        raise BadRequest(f"{len(body.entries)} entries is over the limit of {MAX_ENTRIES}")
    # Nothing asked for, nothing to wait for.
    deadline = time.monotonic() + (body.maxWaitMs / 1000 if body.entries else 0)
    delay = 0.05
    while True:
        results = []
        remaining = body.maxBytes
        for entry in body.entries:
            result = await fetch_entry(state.db, queue=entry.queue,
                                       partition=entry.partition or DEFAULT_PARTITION,
                                       offset=entry.offset,
                                       max_bytes=min(entry.maxBytes, remaining))
            remaining -= sum(len(r.payload) for r in result.records)
            results.append(result)
        if any(r.records or r.error for r in results) or time.monotonic() >= deadline:
            break
        # Nothing yet and the caller is willing to wait: poll with a short backoff.
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.5)
    return json_response(FetchAnswer([_entry_json(r) for r in results]))
