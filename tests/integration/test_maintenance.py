"""Maintenance switches and the push spool (wire-protocol §11), on a database and a 2-worker
broker of this module's own (the switches are global to a database, so they must not touch
the shared one).

Promises: with push maintenance on, a push answers 201 with `buffered` per item, only after
the spool is fsynced; nothing buffered is visible until maintenance ends, then every
buffered message is stored exactly once, in push order per partition, under the message id
the push answered. Pop maintenance makes pops answer 204 (a long poll at its deadline, not
later, and served at once when pops resume). A second broker on the database follows the
switches. A spool file left behind is drained by whoever finds it; a torn last record is
dropped, a damaged file is set aside, and neither is ever misread.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from core.engine.spool import SpoolFiles, file_name
from core.engine.spool_format import HEADER_SIZE, Header, SpoolRecord, encode_header, encode_record
from core.engine.spool_format import MAGIC as SPOOL_MAGIC
from tests.support import BrokerProcess, create_database, fetch_records, pop_json, wait_for

MAINTENANCE = "/api/v1/system/maintenance"
POP_MAINTENANCE = "/api/v1/system/maintenance/pop"


@pytest.fixture(scope="module")
async def own_database(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def spool_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spool")


@pytest.fixture(scope="module")
def broker_a(own_database: str, spool_dir: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(own_database, workers=2,
                       env={"FILE_BUFFER_DIR": str(spool_dir)}) as proc:
        yield proc


@pytest.fixture
async def client(broker_a: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=broker_a.url, timeout=30) as c:
        yield c
        # Whatever a test did, the next one starts with both switches off.
        for path in (MAINTENANCE, POP_MAINTENANCE):
            assert (await c.post(path, json={"enabled": False})).status_code == 200


async def _instance_dir(database_url: str, spool_dir: Path) -> Path:
    conn = await asyncpg.connect(database_url)
    try:
        instance = await conn.fetchval("SELECT instance_id::text FROM queen.system_state")
    finally:
        await conn.close()
    return spool_dir / instance


async def _buffered_is(client: httpx.AsyncClient, count: int) -> bool:
    return bool((await client.get(MAINTENANCE)).json()["bufferedMessages"] == count)


async def _push(client: httpx.AsyncClient, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    r = await client.post("/api/v1/push", json={"items": items})
    assert r.status_code == 201, r.text
    answer: list[dict[str, Any]] = r.json()
    return answer


async def test_switches_answer_both_states_and_refuse_a_body_without_enabled(
        client: httpx.AsyncClient) -> None:
    r = await client.get(MAINTENANCE)
    assert r.status_code == 200
    assert r.json() == {"maintenanceMode": False, "popMaintenanceMode": False,
                        "bufferedMessages": 0, "bufferHealthy": True, "bufferFailed": 0}
    for body in ({}, {"enabled": "yes"}, {"enabled": None}, []):
        for path in (MAINTENANCE, POP_MAINTENANCE):
            r = await client.post(path, json=body)
            assert r.status_code == 400, (path, body, r.text)
            assert ("enabled" if body != [] else "object") in r.json()["error"]
    assert (await client.get(MAINTENANCE)).json()["maintenanceMode"] is False
    r = await client.post(POP_MAINTENANCE, json={"enabled": True})
    assert r.status_code == 200
    assert r.json()["popMaintenanceMode"] is True and r.json()["maintenanceMode"] is False
    assert "pop" in r.json()["message"]
    r = await client.get(POP_MAINTENANCE)
    assert r.json()["popMaintenanceMode"] is True


async def test_pushes_in_maintenance_are_buffered_then_stored_once_in_order(
        client: httpx.AsyncClient, broker_a: BrokerProcess, queue_name: str) -> None:
    r = await client.post(MAINTENANCE, json={"enabled": True})
    assert r.status_code == 200 and r.json()["maintenanceMode"] is True
    # Many connections, so both workers spool; three partitions, interleaved.
    sent: dict[str, list[str]] = {"p0": [], "p1": [], "p2": []}
    answered: dict[str, str] = {}
    for round_ in range(6):
        async with httpx.AsyncClient(base_url=broker_a.url, timeout=30) as fresh:
            items = [{"queue": queue_name, "partition": p, "transactionId": f"{p}-{round_}-{k}",
                      "payload": {"p": p, "r": round_, "k": k}}
                     for k in range(3) for p in sent]
            answer = await _push(fresh, items)
        assert [a["status"] for a in answer] == ["buffered"] * len(items), answer
        for item, a in zip(items, answer):
            sent[item["partition"]].append(item["transactionId"])
            assert a["transaction_id"] == item["transactionId"]
            answered[item["transactionId"]] = a["message_id"]
    total = sum(len(v) for v in sent.values())
    assert (await client.get(MAINTENANCE)).json()["bufferedMessages"] == total

    async def gauges_say(maintenance: int, pending: int) -> bool:
        text = (await client.get("/metrics/prometheus")).text
        return (f"\nqueen_maintenance_mode_enabled {maintenance}.0\n" in text
                and f"\nqueen_file_buffer_pending {pending}.0\n" in text)

    await wait_for(lambda: gauges_say(1, total), timeout=15, interval=0.3)
    # Nothing reaches the database while maintenance lasts.
    assert await pop_json(client, queue_name) is None

    r = await client.post(MAINTENANCE, json={"enabled": False})
    assert r.status_code == 200 and r.json()["maintenanceMode"] is False
    await wait_for(lambda: _buffered_is(client, 0), timeout=15)
    for partition, txids in sent.items():
        records = (await fetch_records(client, queue_name, partition))["records"]
        assert [rec["transactionId"] for rec in records] == txids  # once each, in order
        assert [rec["offset"] for rec in records] == list(range(len(txids)))
    # Delivered exactly once to a consumer, under the message id the push answered.
    got: dict[str, str] = {}
    while (popped := await pop_json(client, queue_name, batch=100, autoAck=True,
                                    partitions=3)) is not None:
        for m in popped["messages"]:
            assert m["transactionId"] not in got
            got[m["transactionId"]] = m["id"]
    assert got == answered
    # And the worker writes straight to the database again.
    answer = await _push(client, [{"queue": queue_name, "payload": "after"}])
    assert answer[0]["status"] == "queued"


async def test_a_replayed_message_is_a_duplicate_not_a_second_copy(
        client: httpx.AsyncClient, queue_name: str) -> None:
    # Stored directly first; the same transactionId spooled later writes nothing.
    first = await _push(client, [{"queue": queue_name, "transactionId": "t", "payload": 1}])
    assert first[0]["status"] == "queued"
    await client.post(MAINTENANCE, json={"enabled": True})
    again = await _push(client, [{"queue": queue_name, "transactionId": "t", "payload": 2}])
    assert again[0]["status"] == "buffered"
    await client.post(MAINTENANCE, json={"enabled": False})
    await wait_for(lambda: _buffered_is(client, 0), timeout=15)
    records = (await fetch_records(client, queue_name))["records"]
    assert [(r["transactionId"], r["payload"]) for r in records] == [("t", 1)]


async def test_pop_maintenance_answers_204_and_long_polls_keep_their_deadline(
        client: httpx.AsyncClient, broker_a: BrokerProcess, queue_name: str) -> None:
    await _push(client, [{"queue": queue_name, "payload": n} for n in range(2)])
    await client.post(POP_MAINTENANCE, json={"enabled": True})
    assert await pop_json(client, queue_name) is None
    started = time.monotonic()
    r = await client.get(f"/api/v1/pop/queue/{queue_name}",
                         params={"wait": "true", "timeout": "1200"})
    waited = time.monotonic() - started
    assert r.status_code == 204 and r.content == b""
    assert 1.1 <= waited < 4.0, waited
    # A long poll parked while pops are paused is served as soon as they resume.
    async with httpx.AsyncClient(base_url=broker_a.url, timeout=30) as other:
        parked = asyncio.create_task(other.get(f"/api/v1/pop/queue/{queue_name}",
                                               params={"wait": "true", "timeout": "20000"}))
        await asyncio.sleep(0.5)
        assert not parked.done()
        resumed = time.monotonic()
        await client.post(POP_MAINTENANCE, json={"enabled": False})
        r = await parked
    assert r.status_code == 200 and time.monotonic() - resumed < 5.0
    # Acks are not paused: the lease it holds can be completed while pops are.
    await client.post(POP_MAINTENANCE, json={"enabled": True})
    message = r.json()["messages"][0]
    ack = await client.post("/api/v1/ack", json={
        "transactionId": message["transactionId"], "partitionId": message["partitionId"],
        "leaseId": message["leaseId"], "status": "completed"})
    assert ack.status_code == 200 and ack.json()[0]["success"] is True, ack.text


async def test_transactions_that_push_and_dlq_replays_are_refused_in_push_maintenance(
        client: httpx.AsyncClient, queue_name: str) -> None:
    await client.post(MAINTENANCE, json={"enabled": True})
    r = await client.post("/api/v1/transaction", json={"operations": [
        {"type": "push", "items": [{"queue": queue_name, "payload": 1}]}]})
    assert r.status_code == 503 and r.headers["retry-after"].isdigit(), r.text
    assert "maintenance" in r.json()["error"]
    r = await client.post("/api/v1/messages/1/some-txid/retry")
    assert r.status_code == 503 and "maintenance" in r.json()["error"]
    r = await client.post("/api/v1/dlq/1/replay")
    assert r.status_code == 503 and "maintenance" in r.json()["error"]
    await client.post(MAINTENANCE, json={"enabled": False})
    assert await pop_json(client, queue_name) is None  # the refused push wrote nothing


async def test_a_second_broker_on_the_database_follows_the_switches(
        client: httpx.AsyncClient, own_database: str, tmp_path: Path, queue_name: str) -> None:
    with BrokerProcess(own_database, workers=1,
                       env={"FILE_BUFFER_DIR": str(tmp_path)}) as other:
        async with httpx.AsyncClient(base_url=other.url, timeout=30) as second:
            await client.post(MAINTENANCE, json={"enabled": True})

            async def second_sees(state: bool) -> bool:
                return bool((await second.get(MAINTENANCE)).json()["maintenanceMode"] is state)

            await wait_for(lambda: second_sees(True), timeout=3)  # NOTIFY, not the re-read
            answer = await _push(second, [{"queue": queue_name, "payload": "via-b"}])
            assert answer[0]["status"] == "buffered"
            assert list(tmp_path.rglob("*.spool")), "the second broker spooled on its disk"
            await second.post(MAINTENANCE, json={"enabled": False})  # switched off there
            await wait_for(lambda: _buffered_is(second, 0), timeout=15)
            records = (await fetch_records(client, queue_name))["records"]
            assert [r["payload"] for r in records] == ["via-b"]


def _write_spool_file(directory: Path, records: list[SpoolRecord], tail: bytes = b"") -> Path:
    """The newest spool file as a writer killed before confirming anything leaves it: its
    header's end still at the start, records and `tail` after it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name(SpoolFiles(directory).next_seq())
    temp = path.with_suffix(".creating")
    temp.write_bytes(encode_header(Header(HEADER_SIZE, HEADER_SIZE, 0, 0))
                     + b"".join(encode_record(r) for r in records) + tail)
    os.rename(temp, path)
    return path


def _records(queue: str, prefix: str, n: int) -> list[SpoolRecord]:
    from core.ids import uuid7

    return [SpoolRecord(uuid7(), f"{prefix}{k}", queue, "Default", b'{"k":%d}' % k)
            for k in range(n)]


async def test_a_left_spool_file_is_drained_and_its_torn_last_record_dropped(
        client: httpx.AsyncClient, own_database: str, spool_dir: Path,
        queue_name: str) -> None:
    directory = await _instance_dir(own_database, spool_dir)
    good = _records(queue_name, "ok", 3)
    torn = encode_record(_records(queue_name, "torn", 1)[0])
    path = _write_spool_file(directory, good, tail=torn[:-3])  # cut short by the crash

    async def drained() -> bool:
        return len((await fetch_records(client, queue_name))["records"]) >= 3

    await wait_for(drained, timeout=10)
    await wait_for(lambda: _buffered_is(client, 0), timeout=10)
    # The torn bytes are gone from the file (the next record will not follow garbage).
    assert not path.exists() or path.stat().st_size == HEADER_SIZE + sum(
        len(encode_record(r)) for r in good)
    popped = await pop_json(client, queue_name, batch=10)
    assert popped is not None
    assert [(m["transactionId"], m["id"], m["data"]) for m in popped["messages"]] == [
        (f"ok{k}", str(r.message_id), {"k": k}) for k, r in enumerate(good)]


async def test_a_damaged_spool_file_is_drained_up_to_the_damage_and_kept(
        client: httpx.AsyncClient, own_database: str, spool_dir: Path,
        queue_name: str) -> None:
    directory = await _instance_dir(own_database, spool_dir)
    before, after = _records(queue_name, "a", 2), _records(queue_name, "b", 2)
    bad = bytearray(encode_record(_records(queue_name, "x", 1)[0]))
    bad[-1] ^= 0xFF  # a flipped bit, with valid records after it: not a torn tail
    path = _write_spool_file(directory, before,
                             tail=bytes(bad) + b"".join(encode_record(r) for r in after))
    kept = path.with_suffix(".damaged")
    await wait_for(lambda: asyncio.sleep(0, kept.exists()), timeout=10)
    assert not path.exists()
    records = (await fetch_records(client, queue_name))["records"]
    assert [r["transactionId"] for r in records] == ["a0", "a1"]
    assert kept.read_bytes().startswith(SPOOL_MAGIC)
    kept.unlink()
