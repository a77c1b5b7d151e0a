"""Queue management: `POST /api/v1/configure` (§4.9), `DELETE /api/v1/resources/queues/{q}` (§4.10)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.common import QueuePath
from broker.wire.http import json_response
from broker.wire.queues import ConfigureAnswer, ConfigureBody, DeleteQueueAnswer


async def configure(request: Request, body: ConfigureBody, tenant: str) -> Response:
    given = body.given()  # options at top level ...
    if body.options is not None:
        given.update(body.options.given())  # ... and nested ones, which win
    config = await broker_of(request).configure(
        queue=body.queue, namespace=body.namespace, task=body.task, given=given,
        replace=body.mode == "replace", tenant=tenant)
    return json_response(ConfigureAnswer(True, str(config.queue_id), None, config.name,
                                         config.namespace, config.task, config.options))


async def delete_queue(request: Request, path: QueuePath, tenant: str) -> Response:
    existed = await broker_of(request).delete_queue(path.queue, tenant=tenant)
    if existed:
        return json_response(DeleteQueueAnswer(True, path.queue, True))
    return json_response(DeleteQueueAnswer(False, path.queue, False,
                                           message="Queue not found, nothing was deleted"))
