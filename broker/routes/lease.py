"""`POST /api/v1/lease/{leaseId}/extend` (§4.8): extend every live lease of a lease id."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.ack import ExtendAnswer, ExtendBody, LeasePath
from broker.wire.http import json_response
from core.timefmt import iso


async def extend(request: Request, path: LeasePath, body: ExtendBody, tenant: str) -> Response:
    expiries = await broker_of(request).extend_lease(path.leaseId, max(1, int(body.seconds)),
                                                     tenant=tenant)
    expires = iso(max(expiries)) if expiries else None
    answer = ExtendAnswer(path.leaseId, bool(expiries), len(expiries), expires, expires,
                          expires)
    if not expiries:
        answer.error = "Lease not found or already expired"
    return json_response(answer)
