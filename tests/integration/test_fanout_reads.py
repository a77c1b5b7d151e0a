"""Pops of several groups reading the same new segment decompress it once, and each group still gets every message of its span."""

from __future__ import annotations

import httpx

from core.engine import fanout
from core.engine.pop import PopRequest
from core.storage.database import Database
from tests.support import core_pop, push_items


async def test_five_groups_reading_one_segment_decompress_it_once(
        http: httpx.AsyncClient, core_db: Database, queue_name: str) -> None:
    await push_items(http, queue_name, [{"n": i} for i in range(10)])  # one segment
    cache = fanout.SEGMENTS
    misses, hits = cache.misses, cache.hits
    seen = []
    for group in ("a", "b", "c", "d", "e"):
        result = await core_pop(core_db, PopRequest(group=group, batch=10, queue=queue_name,
                                               auto_ack=True))
        seen.append([m.frame.payload for m in result.messages()])
    assert seen == [[b'{"n":%d}' % i for i in range(10)]] * 5
    assert (cache.misses - misses, cache.hits - hits) == (1, 4)
