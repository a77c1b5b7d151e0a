"""The Starlette application: `create_app(settings)`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.routing import BaseRoute

from broker import errors
from broker.routes import (
    ack,
    dlq,
    fetch,
    groups,
    health,
    lease,
    messages,
    metrics,
    pop,
    push,
    queues,
    resources,
    status,
    transaction,
)
from broker.state import BrokerState
from core.db import Database, server_settings
from core.embedded import database_dsn
from core.listener import WakeupHub
from core.push import Pusher
from core.settings import Settings

log = logging.getLogger(__name__)



def create_app(settings: Settings, *, draining: asyncio.Event | None = None) -> Starlette:
    """The broker app; whoever runs it sets `draining` when it starts to shut down."""
    drain = draining if draining is not None else asyncio.Event()
    all_routes: list[BaseRoute] = [
        *push.routes, *queues.routes, *fetch.routes, *health.routes,
        *dlq.routes, *messages.routes, *groups.routes, *resources.routes, *metrics.routes,
        *status.routes,
        *pop.routes, *ack.routes, *lease.routes, *transaction.routes,
    ]

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
        app.state.broker = BrokerState(settings, db, pusher, hub, drain)
        try:
            yield
        finally:
            # Shutdown order: stop accepting writes and let queued flushes commit (they need
            # the pool and may announce), then stop the wake-up hub, then close the pool.
            await pusher.close()
            await hub.close()
            await db.close()

    return Starlette(routes=all_routes, exception_handlers=errors.HANDLERS,
                     lifespan=lifespan)
