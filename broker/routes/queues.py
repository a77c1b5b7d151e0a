"""Queue management: `POST /api/v1/configure` (§4.9), `DELETE /api/v1/resources/queues/{q}` (§4.10)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.state import state_of
from broker.wire import check_name, decode_object, json_response, read_body
from core import options, queues
from core.errors import BadRequest


async def configure(request: Request) -> Response:
    state = state_of(request)
    body = decode_object(await read_body(request, state.settings.max_body_bytes))
    if not isinstance(body.get("queue"), str):
        raise BadRequest("queue is required")
    queue = check_name(body["queue"], "queue")
    namespace = _optional_name(body.get("namespace"), "namespace")
    task = _optional_name(body.get("task"), "task")
    mode = body.get("mode") or "merge"
    if mode not in ("merge", "replace"):
        raise BadRequest('mode must be "merge" or "replace"')
    given: dict[str, Any] = {k: body[k] for k in options.DEFAULTS if k in body}
    nested = body.get("options")
    if nested is not None:
        if not isinstance(nested, dict):
            raise BadRequest("options must be an object")
        given.update(nested)
    config = await queues.configure(state.db, queue=queue, namespace=namespace, task=task,
                                    given=given, replace=mode == "replace")
    state.pusher.directory.forget_queue(queue)
    return json_response({
        "configured": True,
        "queueId": str(config.queue_id),
        "partitionId": None,
        "queue": config.name,
        "namespace": config.namespace,
        "task": config.task,
        "options": config.options,
    })


def _optional_name(value: object, what: str) -> str | None:
    return None if value is None else check_name(value, what)


async def delete_queue(request: Request) -> Response:
    state = state_of(request)
    queue = check_name(request.path_params["queue"], "queue")
    existed = await queues.delete_queue(state.db, queue)
    state.pusher.directory.forget_queue(queue)
    if existed:
        return json_response({"deleted": True, "queue": queue, "existed": True})
    return json_response({"deleted": False, "queue": queue, "existed": False,
                          "message": "Queue not found, nothing was deleted"})


routes = [
    Route("/api/v1/configure", configure, methods=["POST"]),
    Route("/api/v1/resources/queues/{queue:path}", delete_queue, methods=["DELETE"]),
]
