"""A spooled push the database refuses for good does not hold the spool (core/engine/spool.py).

Every push goes to the spool while it holds anything, so a record the drain can never write
would hold every later push of the broker, to any queue, forever. Here pushes are spooled
during push maintenance (a database outage spools the same way), then made unacceptable before
maintenance ends: a queue at its maxSize, and a queue left with encryptionEnabled on a broker
without a key. The refused record is set aside in a `.rejected` file (the spool's format), the
records around it are stored in order, and pushes after it reach the database again. A queue
deleted during maintenance is no refusal: the replay creates it again, as a push would.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from core.engine.spool_format import ReadState, read_header, scan
from tests.support import BrokerProcess, configure, fetch_records, push_items, wait_for

MAINTENANCE = "/api/v1/system/maintenance"


async def _maintenance(http: httpx.AsyncClient, enabled: bool) -> None:
    assert (await http.post(MAINTENANCE, json={"enabled": enabled})).status_code == 200


async def _push(http: httpx.AsyncClient, queue: str, txid: str) -> str:
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "transactionId": txid, "payload": {"t": txid}}]})
    assert r.status_code == 201, r.text
    return str(r.json()[0]["status"])


async def _drained(http: httpx.AsyncClient) -> bool:
    return bool((await http.get(MAINTENANCE)).json()["bufferedMessages"] == 0)


async def _stored(http: httpx.AsyncClient, queue: str) -> list[str]:
    return [r["transactionId"] for r in (await fetch_records(http, queue))["records"]]


def _rejected(spool: Path) -> list[tuple[str, str]]:
    """(queue, transactionId) of every record set aside, in order."""
    out = []
    for path in sorted(spool.glob("*/*.rejected")):
        fd = os.open(path, os.O_RDONLY)
        try:
            header = read_header(fd)
            assert header is not None and header.sealed  # never appended to by a writer
            out += [(r.queue, r.transaction_id)
                    for r, _ in scan(fd, header.drained, header.end, ReadState(header.drained))
                    if r is not None]
        finally:
            os.close(fd)
    return out


async def _rejected_total(http: httpx.AsyncClient) -> float:
    for line in (await http.get("/metrics/prometheus")).text.splitlines():
        if line.startswith("queen_cluster_spool_rejected_total "):
            return float(line.split()[1])
    return -1.0


async def _spool_then_refuse(database_url: str, tmp_path: Path, queue: str, fits: list[str],
                             refuse: Any, reason: str) -> None:
    """Spool `late-0`, `fits`, `refused`, `late-1` (`fits` and `refused` to `queue`, the
    others to a queue of their own), `refuse` the last record to `queue`, end maintenance:
    the drain must finish and later pushes be written directly."""
    other = queue + "-other"
    spooled = [(other, "late-0"), *((queue, t) for t in fits), (queue, "refused"),
               (other, "late-1")]
    spool = tmp_path / "spool"
    log = tmp_path / "web.log"
    with BrokerProcess(database_url, workers=1, log_path=log,
                       env={"FILE_BUFFER_DIR": str(spool)}) as broker:
        async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
            await push_items(http, queue, [{"n": 0}], prefix="kept-")  # creates the queue
            await _maintenance(http, True)
            try:
                for q, t in spooled:
                    assert await _push(http, q, t) == "buffered"
                await refuse(http)
            finally:
                await _maintenance(http, False)
            # Before the fix the drain retried `refused` forever, and held everything after it.
            await wait_for(lambda: _drained(http), timeout=15, interval=0.2)
            assert await _push(http, other, "after") == "queued"
            assert await _stored(http, other) == ["late-0", "late-1", "after"]
            assert await _stored(http, queue) == ["kept-0", *fits]
            assert _rejected(spool) == [(queue, "refused")]
            assert await wait_for(lambda: _rejected_total(http), timeout=10) == 1
    logged = [line for line in log.read_text().splitlines() if "set aside" in line]
    assert len(logged) == 1 and queue in logged[0] and reason in logged[0], logged


async def test_a_spooled_push_over_max_size_is_set_aside_and_the_drain_goes_on(
        own_database: str, queue_name: str, tmp_path: Path) -> None:
    async def fill(http: httpx.AsyncClient) -> None:
        await configure(http, queue_name, maxSize=3)  # it holds one already

    # The three are replayed as one flush, which would pass maxSize: refused whole. Each is
    # tried alone, and only the one that does not fit is set aside.
    await _spool_then_refuse(own_database, tmp_path, queue_name, ["fits-0", "fits-1"], fill,
                             "would exceed max capacity")


async def test_a_spooled_push_to_a_queue_encrypted_without_a_key_is_set_aside(
        own_database: str, queue_name: str, tmp_path: Path) -> None:
    async def encrypt(http: httpx.AsyncClient) -> None:
        # configure refuses encryptionEnabled without a key; a queue set so before key
        # checks existed (core/engine/key_check.py) refuses pushes until a key is set.
        conn = await asyncpg.connect(own_database)
        try:
            await conn.execute("UPDATE queen.queues SET options = options || "
                               "'{\"encryptionEnabled\": true}' WHERE name = $1", queue_name)
        finally:
            await conn.close()

    await _spool_then_refuse(own_database, tmp_path, queue_name, [], encrypt,
                             "encryptionEnabled")


async def test_a_queue_deleted_while_its_pushes_were_spooled_is_created_again(
        own_database: str, queue_name: str, tmp_path: Path) -> None:
    with BrokerProcess(own_database, workers=1,
                       env={"FILE_BUFFER_DIR": str(tmp_path / "spool")}) as broker:
        async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
            await push_items(http, queue_name, [{"n": 0}], prefix="gone-")
            await _maintenance(http, True)
            try:
                assert await _push(http, queue_name, "spooled") == "buffered"
                r = await http.delete(f"/api/v1/resources/queues/{queue_name}")
                assert r.status_code == 200, r.text
            finally:
                await _maintenance(http, False)
            await wait_for(lambda: _drained(http), timeout=15, interval=0.2)
            assert await _stored(http, queue_name) == ["spooled"]
    assert not list((tmp_path / "spool").glob("*/*.rejected"))
