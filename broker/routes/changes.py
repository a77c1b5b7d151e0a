"""`POST /api/v1/partitions/changed` (§6.6): the official client's `changed_since`."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.changes import (
    MAX_ENTRIES,
    ChangedAnswer,
    ChangedBody,
    ChangedEntryOut,
    ChangedPartitionOut,
)
from broker.wire.http import json_response
from core.admin.changes import ChangedEntry, ChangedResult
from core.errors import BadRequest
from core.timefmt import iso, iso_or_none


def _entry_json(result: ChangedResult) -> ChangedEntryOut:
    out = ChangedEntryOut([ChangedPartitionOut(
        p.name, str(p.id), p.last_offset, p.log_start,
        iso_or_none(p.last_write_at))
        for p in result.partitions])
    if result.next is not None:
        out.next = str(result.next)
    if result.error is not None:
        out.error = result.error
    return out


async def changed(request: Request, body: ChangedBody, tenant: str) -> Response:
    if len(body.entries) > MAX_ENTRIES:
        raise BadRequest(f"{len(body.entries)} entries is over the limit of {MAX_ENTRIES}")
    entries = [ChangedEntry(e.queue, e.limit, e.since.instant if e.since else None,
                            int(e.after) if e.after else None) for e in body.entries]
    safe, results = await broker_of(request).partitions_changed(entries, tenant=tenant)
    return json_response(ChangedAnswer(iso(safe), [_entry_json(r) for r in results]))
