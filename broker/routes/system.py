"""The maintenance switches (wire-protocol §11): `GET`/`POST /api/v1/system/maintenance`
(pushes to the disk spool) and `/api/v1/system/maintenance/pop` (pops answer 204).

A POST takes `{"enabled": true|false}` and changes the switch for every worker of every
broker on the database (core/admin/switches.py); both routes answer both switches and the spool's
figures (`MaintenanceAnswer`), a POST with a `message` saying what the switch now does.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.http import json_response
from broker.wire.system import MaintenanceAnswer, SwitchBody
from core.service import MaintenanceStatus

_PUSH_TEXT = {True: "push maintenance on: pushes go to the disk spool and answer buffered",
              False: "push maintenance off: pushes go to the database; the spool drains"}
_POP_TEXT = {True: "pop maintenance on: pops answer 204 until it ends",
             False: "pop maintenance off: pops are served"}


def _answer(status: MaintenanceStatus, message: str | None = None) -> Response:
    answer = MaintenanceAnswer(status.push, status.pop, status.buffered_messages,
                               status.database_healthy, status.spool_failed)
    if message is not None:
        answer.message = message
    return json_response(answer)


async def get_maintenance(request: Request) -> Response:
    return _answer(await broker_of(request).maintenance())


async def get_pop_maintenance(request: Request) -> Response:
    """The same answer as `get_maintenance` (each route has its own operation id)."""
    return _answer(await broker_of(request).maintenance())


async def set_maintenance(request: Request, body: SwitchBody) -> Response:
    status = await broker_of(request).set_maintenance(push=body.enabled)
    return _answer(status, _PUSH_TEXT[body.enabled])


async def set_pop_maintenance(request: Request, body: SwitchBody) -> Response:
    status = await broker_of(request).set_maintenance(pop=body.enabled)
    return _answer(status, _POP_TEXT[body.enabled])
