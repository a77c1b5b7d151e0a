"""Lease, dedup and visibility decisions use the database clock (`now()`), so a broker whose
own clock is two hours off (either way) decides exactly as a correct one.

The broker and its reaper run with `tests/faults/clockshift` on PYTHONPATH: its
`sitecustomize` shifts `time.time()` and `time.time_ns()` in every process (nothing in the
broker knows). The test first proves the shift is live (message ids are UUIDv7 minted from
the broker's clock), then checks each decision against what the database clock demands. The
one wall clock the shim cannot move, `datetime.now()`, is kept out of the core by a check.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import asyncpg
import httpx
import pytest

from tests.support import (
    ROOT,
    BrokerProcess,
    announce_changed,
    configure,
    cursor_row,
    expire_leases_of,
    pop_json,
    push_items,
    wait_for,
)

SKEW = 7200.0
SHIM = ROOT / "tests" / "faults" / "clockshift"


@pytest.fixture(params=[SKEW, -SKEW], ids=["ahead-2h", "behind-2h"], scope="module")
def skewed(request: pytest.FixtureRequest, database_url: str) -> Iterator[BrokerProcess]:
    path = os.pathsep.join(p for p in (str(SHIM), os.environ.get("PYTHONPATH")) if p)
    env = {"PYTHONPATH": path, "QUEEN_TEST_CLOCK_SKEW": str(request.param),
           "REAPER_INTERVAL_MS": "50"}
    with BrokerProcess(database_url, workers=1, reaper=True, env=env) as proc:
        proc.skew = request.param  # type: ignore[attr-defined]
        yield proc


def uuid7_seconds(text: str) -> float:
    return (uuid.UUID(text).int >> 80) / 1000


async def test_a_skewed_broker_decides_leases_dedup_and_delays_by_the_database_clock(
        skewed: BrokerProcess, db: asyncpg.Connection, queue_name: str) -> None:
    skew = skewed.skew  # type: ignore[attr-defined]
    async with httpx.AsyncClient(base_url=skewed.url, timeout=30) as http:
        await configure(http, queue_name, leaseTime=30, dedupWindowSeconds=3600)
        r = await http.post("/api/v1/push", json={"items": [
            {"queue": queue_name, "transactionId": "t0", "payload": 0}]})
        # The shift is live in the web worker: its message ids carry its skewed clock.
        assert abs(uuid7_seconds(r.json()[0]["message_id"]) - (time.time() + skew)) < 60

        # Dedup: a repeat seconds later is a duplicate, although the broker's clock says
        # two hours (more than the window) passed, or that the original is from the future.
        again = await http.post("/api/v1/push", json={"items": [
            {"queue": queue_name, "transactionId": "t0", "payload": 1}]})
        assert again.json()[0]["status"] == "duplicate"

        # Leases: a 30 s lease is live for the reaper and for acks of a skewed broker.
        body = await pop_json(http, queue_name, consumerGroup="g")
        assert body is not None
        created = datetime.fromisoformat(body["messages"][0]["createdAt"])
        assert abs((created - datetime.now(UTC)).total_seconds()) < 60  # stamped by now()
        canary = queue_name + "-canary"
        await push_items(http, canary, ["c"])
        assert await pop_json(http, canary, consumerGroup="g") is not None
        assert await expire_leases_of(db, canary) == 1

        async def reaper_passed() -> bool:  # the skewed reaper released the expired canary
            row = await cursor_row(db, canary, "g")
            return row is not None and row["worker_id"] is None
        await wait_for(reaper_passed, timeout=15)
        row = await cursor_row(db, queue_name, "g")
        assert row is not None and row["worker_id"] == body["leaseId"] and row["lease_live"]
        ext = await http.post(f"/api/v1/lease/{body['leaseId']}/extend", json={"seconds": 40})
        expires = datetime.fromisoformat(ext.json()["newExpiresAt"])
        assert 20 < (expires - datetime.now(UTC)).total_seconds() < 100
        r = await http.post("/api/v1/ack/batch", json={"consumerGroup": "g", "acknowledgments": [
            {"transactionId": "t0", "partitionId": body["partitionId"], "status": "completed",
             "leaseId": body["leaseId"]}]})
        assert r.json()[0]["success"] is True

        # Visibility: delayedProcessing counts from the database clock too.
        delayed = queue_name + "-delayed"
        await configure(http, delayed, delayedProcessing=60)
        await push_items(http, delayed, ["later"])
        assert await pop_json(http, delayed, consumerGroup="g") is None
        await db.execute(
            """UPDATE queen.log_segments s SET created_at = s.created_at - interval '61 seconds'
                 FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                WHERE s.partition_id = p.id AND q.name = $1""", delayed)
        await announce_changed(db, delayed)  # the broker expects it in a minute
        late = await pop_json(http, delayed, consumerGroup="g")
        assert late is not None and [m["data"] for m in late["messages"]] == ["later"]


def test_the_core_reads_no_wall_clock_but_the_message_id_minter() -> None:
    """Every instant the core decides by is SQL `now()`: it reads no wall clock itself, except
    core/ids.py (UUIDv7 ids embed the minting time; no decision reads it back)."""
    wall_clock = re.compile(r"\b(datetime\.(now|utcnow|today)|date\.today|time\.time(_ns)?)\(")
    readers = sorted(p.name for p in (ROOT / "core").glob("*.py")
                     if wall_clock.search(p.read_text()))
    assert readers == ["ids.py"]
