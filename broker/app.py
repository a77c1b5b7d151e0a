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
from core.db import Database, server_settings
from core.embedded import database_dsn
from core.listener import WakeupHub
from core.push import Pusher
from core.settings import Settings

log = logging.getLogger(__name__)


def create_app(settings: Settings, *, draining: asyncio.Event | None = None) -> Starlette:
    """The broker app; whoever runs it sets `draining` when it starts to shut down."""
    from broker.table import ENDPOINTS  # imports every route module

    drain = draining if draining is not None else asyncio.Event()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        dsn = database_dsn(settings)
        db = await Database.open(settings, dsn)
        hub = WakeupHub(dsn, server_settings(settings))
        pusher = Pusher(db, max_flush_messages=settings.max_flush_messages,
                        max_pending_messages=settings.max_pending_messages,
                        max_partitions_per_flush=settings.max_partitions_per_flush,
                        max_concurrent_flushes=settings.max_concurrent_flushes,
                        on_appended=lambda ref: hub.announce([ref.queue_id],
                                                             ref.partition_id))
        await hub.start()
        gate = await Gate.start(settings.auth)
        app.state.broker = BrokerState(settings, db, pusher, hub, drain, gate)
        try:
            yield
        finally:
            # Shutdown order: stop accepting writes and let queued flushes commit (they need
            # the pool and may announce), then stop the wake-up hub, then close the pool;
            # the gate (its JWKS refresh) holds nothing the others need.
            await pusher.close()
            await hub.close()
            await db.close()
            await gate.close()

    app = Starlette(routes=starlette_routes(ENDPOINTS), exception_handlers=errors.HANDLERS,
                    middleware=[Middleware(Cors, origins=settings.cors_origins)],
                    lifespan=lifespan)
    app.state.openapi = msgspec.json.encode(build_document(ENDPOINTS, VERSION, settings.auth))
    return app
