"""The Starlette application: `create_app(settings)`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import msgspec
from starlette.applications import Starlette
from starlette.middleware import Middleware

from broker import errors
from broker.auth.gate import Gate
from broker.cors import Cors
from broker.endpoint import starlette_routes
from broker.openapi import build_document
from broker.routes.health import VERSION
from broker.state import BrokerState
from core.service import Broker
from core.settings import Settings
from core.tracing import Tracing

log = logging.getLogger(__name__)


def create_app(settings: Settings, *, draining: asyncio.Event | None = None,
               tracing: Tracing | None = None) -> Starlette:
    """The broker app; whoever runs it sets `draining` when it starts to shut down.
    `tracing` records spans (default: as TRACING_EXPORTER says)."""
    from broker.table import ENDPOINTS  # imports every route module

    drain = draining if draining is not None else asyncio.Event()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # The broker's side tasks run under this block: one that dies cancels it, the
        # lifespan fails, and the worker exits to be replaced (broker/worker.py). Shutdown
        # order (Broker.open): long polls stop waiting, queued flushes commit, the wake-up
        # loops stop, the pool closes; the gate (its JWKS refresh) holds nothing they need.
        gate = await Gate.start(settings.auth)
        try:
            async with Broker.open(settings, stop_waiting=drain, tracing=tracing) as broker:
                app.state.broker = BrokerState(settings, broker, gate)
                yield
        finally:
            await gate.close()

    app = Starlette(routes=starlette_routes(ENDPOINTS), exception_handlers=errors.HANDLERS,
                    middleware=[Middleware(Cors, origins=settings.cors_origins)],
                    lifespan=lifespan)
    app.state.openapi = msgspec.json.encode(build_document(ENDPOINTS, VERSION, settings.auth))
    return app
