"""A long poll's look abandoned past its deadline (core/engine/longpoll.py) whose claim still
commits: nobody received those messages, so they are released at once (core/engine/
give_back.py), not left leased until the queue's lease time ends.

The look is made slow by a lock on the segments, held by another session past the pop's
deadline and grace, and dropped once the pop has answered empty.
"""

from __future__ import annotations

import time
import uuid

import asyncpg
import pytest

from core.engine.pop import PopRequest
from core.engine.push import PushItem
from core.engine.writes import NewMessage
from core.service import Broker
from core.settings import Settings
from tests.support import wait_for

# On one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus

SETTINGS = Settings(db_pool_size=2, metrics_flush_ms=600_000)


async def test_a_claim_that_commits_after_its_long_poll_answered_empty_is_given_back(
        database_url: str, queue_name: str) -> None:
    async with Broker.open(SETTINGS, dsn=database_url, migrate=False) as broker:
        await broker.push([PushItem(queue_name, "p", NewMessage(uuid.uuid4(), "m1", b"{}"))])
        request = PopRequest(group="g", batch=10, queue=queue_name)
        blocker = await asyncpg.connect(database_url)
        try:
            locked = blocker.transaction()
            await locked.start()
            await blocker.execute("LOCK TABLE queen.log_segments IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            # Abandoned after its deadline and the grace (3 s); answered empty.
            answered = await broker.pop(request, wait=True, timeout_ms=200)
            assert not answered.claims and time.monotonic() - started < 9
            await locked.rollback()  # the look goes on and commits its claim
        finally:
            await blocker.close()

        async def popped() -> list[str]:
            result = await broker.pop(request)
            return [m.frame.transaction_id for m in result.messages()]
        # The queue's lease time is 300 s: without the give-back, nothing for that long.
        again = await wait_for(popped, timeout=10, interval=0.2)
    assert again == ["m1"]
