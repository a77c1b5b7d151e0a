"""Two in-process brokers over one database, each with its own LISTEN and NOTIFY sessions:
how the wake-up tests stand for two web workers."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

from core.engine.push import PushItem
from core.engine.writes import NewMessage
from core.service import Broker
from core.settings import Settings
from tests.support import wait_for


@contextlib.asynccontextmanager
async def listening_pair(settings: Settings, dsn: str) -> AsyncIterator[tuple[Broker, Broker]]:
    """Two brokers on `dsn`, yielded once both hear notifications."""
    async with Broker.open(settings, dsn=dsn, migrate=False) as a, \
            Broker.open(settings, dsn=dsn, migrate=False) as b:
        async def listening() -> bool:
            return a._hub.listening and b._hub.listening
        await wait_for(listening)
        yield a, b


async def push_partitions(broker: Broker, queue: str, partitions: list[str]) -> None:
    """One message to each partition named, all queued."""
    outcomes = await broker.push([PushItem(queue, p, NewMessage(uuid.uuid4(), uuid.uuid4().hex,
                                                                b"{}")) for p in partitions])
    assert [o.verdict.status for o in outcomes if o.verdict] == ["queued"] * len(partitions)
