"""`POST /api/v1/lease/{leaseId}/extend` (§4.8): extend every live lease of a lease id."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.state import state_of
from broker.wire import check_name, decode_object, json_response, read_body
from core.errors import BadRequest
from core.leases import extend_lease
from core.timefmt import iso

DEFAULT_SECONDS = 60
MAX_SECONDS = 86400


async def extend(request: Request) -> Response:
    state = state_of(request)
    lease_id = check_name(request.path_params["leaseId"], "leaseId")
    body = decode_object(await read_body(request, state.settings.max_body_bytes))
    seconds = body.get("seconds", DEFAULT_SECONDS)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not 0 < seconds <= MAX_SECONDS:
        raise BadRequest(f"seconds must be a number between 1 and {MAX_SECONDS}")
    expiries = await extend_lease(state.db, lease_id, int(seconds))
    expires = iso(max(expiries)) if expiries else None
    answer: dict[str, Any] = {
        "leaseId": lease_id, "success": bool(expiries), "renewed": len(expiries),
        "newExpiresAt": expires, "expiresAt": expires, "lease_expires_at": expires,
    }
    if not expiries:
        answer["error"] = "Lease not found or already expired"
    return json_response(answer)


routes = [Route("/api/v1/lease/{leaseId}/extend", extend, methods=["POST"])]
