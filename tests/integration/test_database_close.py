"""Closing the database pool ends even when the server stopped answering: asyncpg's own
close waits for the server to acknowledge each connection's end, with no limit, and a
broker stopping during a frozen primary never exited (found by the SIGSTOP failover test)."""

from __future__ import annotations

import asyncio

from core.settings import Settings
from core.storage.database import Database
from tests.wire_counter import counting_proxy


async def test_the_pool_of_a_frozen_server_closes_within_its_timeout(database_url: str) -> None:
    async with counting_proxy(database_url) as (dsn, proxy):
        db = await Database.open(Settings(db_pool_size=2), dsn, migrate=False)
        async with db.session() as conn:
            assert await conn.fetchval("SELECT 1") == 1
        proxy.frozen = True  # from here the server hears nothing, the Terminate included
        try:
            await asyncio.wait_for(db.close(timeout=0.5), 20)
        finally:
            proxy.frozen = False
