"""A queue whose windowBuffer holds its partitions back: its empty pops claim none of them
(schema/queries/ready.sql, `ready_partitions`).
The ready set's seed scan counted such a partition ready; a claim answered it `later` and
the lane deferred it, but a lane holding more partitions than its cap reseeds before it
answers nothing, and each reseed marked them all ready again: every empty pop of such a
queue of 5,000 partitions made 1,875 claim statements and took 2 s. The scan now gives
them their due, as it gives a lease's. (delayedProcessing still walks them: its due needs a
lookup of the group's next segment that Citus would plan on every node.)"""

from __future__ import annotations

import httpx
import pytest

from core.engine.pop import PopRequest
from core.engine.ready.reader import Reader
from core.engine.ready.ready_set import ReadySet
from core.storage.database import Database

pytestmark = pytest.mark.citus

PARTITIONS = 60
CAP = 16  # the lane's cap, far below the queue's partitions: every empty pop reseeds


async def test_a_window_buffered_queue_s_empty_pops_claim_none_of_its_partitions(
        http: httpx.AsyncClient, core_db: Database, queue_name: str) -> None:
    r = await http.post("/api/v1/configure", json={
        "queue": queue_name, "options": {"windowBuffer": 600}})
    assert r.status_code in (200, 201), r.text
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue_name, "partition": f"p{n}", "payload": {"n": n}}
        for n in range(PARTITIONS)]})
    assert r.status_code == 201, r.text
    reader = Reader(core_db, ReadySet(core_db, lambda: 1, lane_cap=CAP))
    request = PopRequest(group="g", batch=1, queue=queue_name)
    for _ in range(4):
        assert (await reader.pop(request)).count == 0  # nothing old enough
    # The first pop's statement registers the group; none claims a partition. Before: 49
    # (every pop walked them all, more than once).
    assert reader.statements == 1
