"""`POST /api/v1/fetch`: offset reads with no lease and no cursor (§6.6)."""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.fetch import (
    MAX_ENTRIES,
    FetchAnswer,
    FetchBody,
    FetchEntryOut,
    FetchRecord,
)
from broker.wire.http import json_response
from core.errors import BadRequest
from core.timefmt import iso
from core.types import DEFAULT_PARTITION, FetchEntry, FetchResult


def _entry_json(result: FetchResult) -> FetchEntryOut:
    out = FetchEntryOut(
        result.queue, result.partition,
        [FetchRecord(r.offset, r.transaction_id, msgspec.Raw(r.payload), iso(r.created_at),
                     r.producer_sub) for r in result.records],
        result.high_watermark, result.log_start)
    if result.error:
        out.error = result.error
    return out


async def fetch(request: Request, body: FetchBody, tenant: str) -> Response:
    if len(body.entries) > MAX_ENTRIES:
        raise BadRequest(f"{len(body.entries)} entries is over the limit of {MAX_ENTRIES}")
    entries = [FetchEntry(e.queue, e.partition or DEFAULT_PARTITION, e.offset, e.maxBytes,
                          tenant) for e in body.entries]
    results = await broker_of(request).fetch(entries, max_bytes=body.maxBytes,
                                             max_wait_ms=body.maxWaitMs)
    return json_response(FetchAnswer([_entry_json(r) for r in results]))
