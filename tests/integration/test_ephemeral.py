"""Ephemeral queues (wire-protocol-extensions §19) through the official client's
`client.ephemeral` and plain HTTP, against the session broker (2 workers, one database)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from queen import Queen
from queen.errors import EphemeralError, EphemeralQueueNotFoundError

from core.ephemeral.waiters import CHANNEL
from core.storage import ephemeral as store
from core.storage.database import Database
from tests.support import BrokerProcess, create_database

EPH = "/api/v1/ephemeral"


@pytest.fixture
def eq() -> str:
    return "eq-" + uuid.uuid4().hex[:12]


@pytest.fixture
async def client(broker: BrokerProcess) -> AsyncIterator[Queen]:
    async with Queen(broker.url, retry_429={"max_attempts": 1}) as q:
        yield q


async def _lease_passes(db: asyncpg.Connection, queue: str) -> None:
    """Make every lease of the queue pass now (as waiting its leaseSeconds would)."""
    await db.execute("UPDATE queen.eph_lease SET expires_at = now() - interval '1 second' "
                     "WHERE queue = $1", queue)


async def _listed(client: Queen, queue: str) -> dict[str, Any]:
    return next(q for q in (await client.ephemeral.queues())["queues"] if q["queue"] == queue)


async def test_official_client_flow(client: Queen, eq: str) -> None:
    eph = client.ephemeral
    configured = await eph.configure(eq, max_length=100, lease_seconds=60)
    assert configured["queue"] == eq and configured["options"] == {
        "maxLength": 100, "leaseSeconds": 60}
    assert (await eph.push(eq, [{"n": 1}, {"n": 2}, {"n": 3}]))["pushed"] == 3
    depth = await eph.depth(eq)
    assert depth["pending"] == 3 and depth["tier"] == "declared"
    got = await eph.pop(eq, batch=2)
    assert [m["payload"] for m in got["messages"]] == [{"n": 1}, {"n": 2}]
    assert [m["attempts"] for m in got["messages"]] == [1, 1]
    assert all(m["id"].startswith("e:") and m["partition"] == "Default"
               for m in got["messages"])
    acked = await eph.ack(eq, got["messages"])
    assert [r["outcome"] for r in acked["results"]] == ["acked", "acked"]
    again = await eph.ack(eq, got["messages"][0])
    assert [r["outcome"] for r in again["results"]] == ["unknown"]
    listing = await eph.queues()
    mine = [q for q in listing["queues"] if q["queue"] == eq]
    assert mine and mine[0]["tier"] == "declared" and mine[0]["depth"] == 1
    assert mine[0]["options"]["maxLength"] == 100
    assert mine[0]["options"]["windowBuffer"] == {"ms": 0, "count": 0}
    reset = await eph.reset(eq)
    assert reset == {"queue": eq, "dropped": 1}
    assert (await eph.pop(eq))["messages"] == []
    deleted = await eph.delete(eq)
    assert deleted == {"queue": eq, "deleted": True, "declared": True}
    with pytest.raises(EphemeralQueueNotFoundError):
        await eph.depth(eq)
    assert await eph.delete(eq) == {"queue": eq, "deleted": False, "declared": False}


async def test_groups_fan_out_and_queue_mode_competes(client: Queen, eq: str) -> None:
    eph = client.ephemeral
    await eph.push(eq, [1, 2, 3])
    b1 = await eph.pop(eq, group="b", batch=2)
    a = await eph.pop(eq, group="a", batch=10, auto_ack=True)
    b2 = await eph.pop(eq, group="b", batch=2)
    assert [m["payload"] for m in a["messages"]] == [1, 2, 3]
    assert [m["payload"] for m in b1["messages"]] == [1, 2]
    assert [m["payload"] for m in b2["messages"]] == [3]
    # a group seen later starts at the ring's head: what `b` still holds a lease on
    late = await eph.pop(eq, group="late", batch=10)
    assert [m["payload"] for m in late["messages"]] == [1, 2, 3]
    depth = await eph.depth(eq)
    assert {g["group"]: g["pending"] for g in depth["groups"]} == {"a": 0, "b": 0, "late": 0}
    # every known group passed them: freed, so a group seen now starts empty
    await eph.ack(eq, b1["messages"] + b2["messages"], group="b")
    await eph.ack(eq, late["messages"], group="late")
    assert (await eph.depth(eq))["bytes"] == 0
    assert (await eph.pop(eq, group="later"))["messages"] == []


async def test_partitions_fifo_in_name_order(client: Queen, eq: str) -> None:
    eph = client.ephemeral
    await eph.push(eq, ["b1", "b2"], partition="b")
    await eph.push(eq, ["a1"], partition="a")
    got = await eph.pop(eq, batch=10, auto_ack=True)
    assert [(m["partition"], m["payload"]) for m in got["messages"]] == [
        ("a", "a1"), ("b", "b1"), ("b", "b2")]


async def test_lease_expiry_redelivers_first_with_attempts(client: Queen, eq: str,
                                                           db: asyncpg.Connection) -> None:
    eph = client.ephemeral
    await eph.push(eq, ["x", "y"])
    first = (await eph.pop(eq))["messages"]
    assert [m["payload"] for m in first] == ["x"]
    await _lease_passes(db, eq)
    assert [r["outcome"] for r in (await eph.ack(eq, first))["results"]] == ["unknown"]
    again = (await eph.pop(eq, batch=2))["messages"]
    assert [(m["payload"], m["attempts"]) for m in again] == [("x", 2), ("y", 1)]
    retried = await eph.ack(eq, [{"id": again[0]["id"], "status": "retry"}])
    assert retried["results"][0]["outcome"] == "redelivered"
    third = (await eph.pop(eq))["messages"]
    assert [(m["payload"], m["attempts"]) for m in third] == [("x", 3)]


async def test_retry_limit_drops_and_counts(client: Queen, eq: str,
                                            db: asyncpg.Connection) -> None:
    eph = client.ephemeral
    await eph.configure(eq, retry_limit=2)
    await eph.push(eq, ["doomed"])
    m = (await eph.pop(eq))["messages"][0]
    assert (await eph.ack(eq, m, status=False))["results"][0]["outcome"] == "redelivered"
    m = (await eph.pop(eq))["messages"][0]
    assert m["attempts"] == 2
    # past the limit: dropped, answered acked, counted
    assert (await eph.ack(eq, m, status="failed"))["results"][0]["outcome"] == "acked"
    assert (await eph.pop(eq))["messages"] == []
    # and by expiry
    await eph.push(eq, ["expires"])
    m = (await eph.pop(eq))["messages"][0]
    await _lease_passes(db, eq)
    m = (await eph.pop(eq))["messages"][0]
    assert m["attempts"] == 2
    await _lease_passes(db, eq)
    assert (await eph.pop(eq))["messages"] == []
    listed = await _listed(client, eq)
    assert listed["drops"]["retry"] == 2 and listed["depth"] == 0


async def test_bounds_reject_and_drop_oldest(broker: BrokerProcess, client: Queen,
                                             eq: str) -> None:
    eph = client.ephemeral
    await eph.configure(eq, max_length=3)
    await eph.push(eq, [1, 2, 3])
    with pytest.raises(EphemeralError) as refused:
        await eph.push(eq, [4])
    assert refused.value.code == "queue_full"
    async with httpx.AsyncClient(base_url=broker.url) as http:
        r = await http.post(EPH + "/push", json={"queue": eq, "messages": [{"payload": 4}]})
    assert r.status_code == 429 and r.json()["code"] == "queue_full"
    assert (await eph.depth(eq))["pending"] == 3
    # dropOldest evicts from the head of the pushed ring; a group behind counts skipped
    await eph.configure(eq, max_length=3, policy="dropOldest")
    got = (await eph.pop(eq, group="slow", auto_ack=True))["messages"]
    assert [m["payload"] for m in got] == [1]  # its only group passed it: freed
    await eph.push(eq, [4, 5])  # 2, 3 + 4, 5 is one too many: 2 goes
    rest = (await eph.pop(eq, group="slow", batch=10, auto_ack=True))["messages"]
    assert [m["payload"] for m in rest] == [3, 4, 5]
    listed = await _listed(client, eq)
    assert listed["drops"]["bounds"] == 1
    depth = await eph.depth(eq)
    assert {g["group"]: g["skipped"] for g in depth["groups"]} == {"slow": 1}
    # a push larger than the bounds altogether is refused even under dropOldest
    with pytest.raises(EphemeralError) as too_big:
        await eph.push(eq, [6, 7, 8, 9])
    assert too_big.value.code == "queue_full"


async def test_max_bytes_bound(client: Queen, eq: str) -> None:
    eph = client.ephemeral
    await eph.configure(eq, max_bytes=10)
    await eph.push(eq, ["abcd"])  # 6 bytes of JSON
    with pytest.raises(EphemeralError) as refused:
        await eph.push(eq, ["abcd"])
    assert refused.value.code == "queue_full"


async def test_ttl_drops_from_head(client: Queen, eq: str, db: asyncpg.Connection) -> None:
    eph = client.ephemeral
    await eph.configure(eq, ttl_seconds=60)
    await eph.push(eq, ["old"])
    await db.execute("UPDATE queen.eph_message SET created_at = now() - interval '2 minutes' "
                     "WHERE queue = $1", eq)
    await eph.push(eq, ["new"])
    got = (await eph.pop(eq, batch=10, auto_ack=True))["messages"]
    assert [m["payload"] for m in got] == ["new"]
    listed = await _listed(client, eq)
    assert listed["drops"]["ttl"] == 1


async def test_ttl_sweep_runs_without_a_touch(client: Queen, eq: str,
                                              db: asyncpg.Connection) -> None:
    eph = client.ephemeral
    await eph.configure(eq, ttl_seconds=1)
    await eph.push(eq, ["a", "b"])

    async def gone() -> bool:
        listed = await _listed(client, eq)
        return bool(listed["depth"] == 0 and listed["drops"]["ttl"] == 2)
    deadline = asyncio.get_running_loop().time() + 15
    while not await gone():
        assert asyncio.get_running_loop().time() < deadline, "the sweep never dropped them"
        await asyncio.sleep(0.2)


async def test_waiting_pop_woken_by_push_and_answers_at_deadline(client: Queen,
                                                                 eq: str) -> None:
    eph = client.ephemeral
    empty = await eph.pop(eq, wait=True, timeout=300)
    assert empty["messages"] == []
    waiting = asyncio.create_task(eph.pop(eq, wait=True, timeout=20_000))
    await asyncio.sleep(0.5)
    assert not waiting.done()
    await eph.push(eq, ["wake"])
    got = await asyncio.wait_for(waiting, 10)
    assert [m["payload"] for m in got["messages"]] == ["wake"]


async def test_window_buffer_collects(client: Queen, eq: str) -> None:
    eph = client.ephemeral
    await eph.configure(eq, window_buffer={"ms": 20_000, "count": 3})
    waiting = asyncio.create_task(eph.pop(eq, batch=10, wait=True, timeout=20_000))
    for n in range(3):
        await asyncio.sleep(0.2)
        await eph.push(eq, [n])
    got = await asyncio.wait_for(waiting, 15)
    assert [m["payload"] for m in got["messages"]] == [0, 1, 2]


async def test_payload_bytes_round_trip(broker: BrokerProcess, eq: str) -> None:
    body = b'{"queue": "%s", "messages": [{"payload": {"b": 1,  "a": [1.50, "\\u00e9"]}}]}' % (
        eq.encode())
    async with httpx.AsyncClient(base_url=broker.url) as http:
        r = await http.post(EPH + "/push", content=body,
                            headers={"content-type": "application/json"})
        assert r.status_code == 201 and r.json() == {"pushed": 1}
        popped = await http.get(EPH + "/pop", params={"queue": eq})
    assert popped.status_code == 200
    assert b'"payload":{"b": 1,  "a": [1.50, "\\u00e9"]}' in popped.content


async def test_configure_echoes_the_queue_and_options_as_sent_and_when_stored(
        broker: BrokerProcess, eq: str) -> None:
    """The answer's fields in their order; no options at all echo as `{}`."""
    async with httpx.AsyncClient(base_url=broker.url) as http:
        bare = await http.post(EPH + "/configure", json={"queue": eq})
        sent = await http.post(EPH + "/configure", json={
            "queue": eq, "options": {"windowBuffer": {"count": 2}, "maxLength": 5}})
    assert bare.status_code == 201 and sent.status_code == 201
    assert list(bare.json()) == ["queue", "options", "updatedAt"]
    assert bare.json()["queue"] == eq and bare.json()["options"] == {}
    assert sent.content.startswith(b'{"queue":"%s","options":{"windowBuffer":{"count":2},'
                                   b'"maxLength":5},"updatedAt":"' % eq.encode())


async def test_stale_epoch_and_unparsable_ids(client: Queen, eq: str) -> None:
    eph = client.ephemeral
    await eph.push(eq, ["x"])
    m = (await eph.pop(eq))["messages"][0]
    _, epoch, rest = m["id"].split(":", 2)
    old = f"e:{int(epoch, 16) + 1:x}:{rest}"
    out = await eph.ack(eq, [old, "nonsense", m["id"], m["id"]])
    # the same id twice in one call: the first settles the lease, the repeat finds none
    assert [r["outcome"] for r in out["results"]] == ["stale", "unknown", "acked", "unknown"]


async def test_metrics_count_ephemeral_queues(broker: BrokerProcess, client: Queen,
                                              eq: str) -> None:
    await client.ephemeral.configure(eq, max_length=1, policy="dropOldest")
    await client.ephemeral.push(eq, ["a"])
    await client.ephemeral.push(eq, ["b"])
    async with httpx.AsyncClient(base_url=broker.url) as http:
        figures = (await http.get("/metrics")).json()["ephemeral"]
        text = (await http.get("/metrics/prometheus")).text
    assert figures["queues"] >= 1 and figures["messages"] >= 1
    assert figures["bytes"] >= 3 and figures["drops"]["bounds"] >= 1
    assert "\nqueen_ephemeral_bytes " in text and "\nqueen_ephemeral_messages " in text
    assert 'queen_ephemeral_drops{reason="bounds"}' in text


@pytest.fixture(scope="module")
async def tight_database(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def tight(tight_database: str) -> Iterator[BrokerProcess]:
    """A broker on a database of its own with a 4 KiB ceiling on held bytes and implicit
    queues collected after 1 s idle."""
    with BrokerProcess(tight_database, workers=1, env={
            "EPHEMERAL_MAX_BYTES": "4096", "EPHEMERAL_IDLE_SECONDS": "1"}) as proc:
        yield proc


async def test_the_deployment_ceiling_answers_503(tight: BrokerProcess) -> None:
    async with httpx.AsyncClient(base_url=tight.url) as http:
        body = {"queue": "ceiling", "messages": [{"payload": "x" * 998}]}  # 1000 bytes
        for _ in range(4):
            assert (await http.post(EPH + "/push", json=body)).status_code == 201
        r = await http.post(EPH + "/push", json=body)
        assert r.status_code == 503 and r.json()["code"] == "ephemeral_unavailable"
        assert r.headers["retry-after"]
        assert (await http.get(EPH + "/queues")).json()["cellBytes"] == 4000
        # room again once something is consumed
        await http.get(EPH + "/pop", params={"queue": "ceiling", "autoAck": "true"})
        assert (await http.post(EPH + "/push", json=body)).status_code == 201


async def test_idle_implicit_queues_are_collected_declared_ones_kept(
        tight: BrokerProcess) -> None:
    async with httpx.AsyncClient(base_url=tight.url) as http:
        for q in ("idle-a", "idle-declared"):
            await http.post(EPH + "/push", json={"queue": q, "messages": [{"payload": 1}]})
        await http.post(EPH + "/configure", json={"queue": "idle-declared"})
        first = (await http.get(EPH + "/pop", params={"queue": "idle-a", "autoAck": "true"}))
        await http.get(EPH + "/pop", params={"queue": "idle-declared", "autoAck": "true"})
        deadline = asyncio.get_running_loop().time() + 15
        while (await http.get(EPH + "/queues/idle-a/depth")).status_code != 404:
            assert asyncio.get_running_loop().time() < deadline, "never collected"
            await asyncio.sleep(0.2)
        assert (await http.get(EPH + "/queues/idle-declared/depth")).status_code == 200
        # created again: its seq continues, never reused within the epoch
        await http.post(EPH + "/push", json={"queue": "idle-a", "messages": [{"payload": 2}]})
        again = (await http.get(EPH + "/pop", params={"queue": "idle-a"})).json()["messages"]
        old_seq = int(first.json()["messages"][0]["id"].rsplit(":", 1)[1])
        assert int(again[0]["id"].rsplit(":", 1)[1]) > old_seq


async def test_a_parked_pop_whose_client_left_takes_nothing(broker: BrokerProcess,
                                                            eq: str) -> None:
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
        parked = asyncio.create_task(http.get(EPH + "/pop", params={
            "queue": eq, "wait": "true", "timeout": "20000"}))
        await asyncio.sleep(1.0)
        parked.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await parked
    await asyncio.sleep(1.0)
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
        await http.post(EPH + "/push", json={"queue": eq, "messages": [{"payload": "mine"}]})
        got = (await http.get(EPH + "/pop", params={"queue": eq})).json()["messages"]
    assert [(m["payload"], m["attempts"]) for m in got] == [("mine", 1)]


async def test_concurrent_pushes_are_each_all_or_nothing(broker: BrokerProcess,
                                                         eq: str) -> None:
    """Pushes racing into a nearly full queue (a worker gathers concurrent pushes into one
    call): each is written whole or refused whole, and the bound holds."""
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
        await http.post(EPH + "/configure", json={"queue": eq, "options": {"maxLength": 15}})
        answers = await asyncio.gather(*(
            http.post(EPH + "/push", json={"queue": eq, "messages": [
                {"payload": [i, 0]}, {"payload": [i, 1]}]}) for i in range(20)))
        assert sorted(r.status_code for r in answers) == [201] * 7 + [429] * 13
        got = (await http.get(EPH + "/pop", params={"queue": eq, "batch": 100})).json()
    pairs = [m["payload"] for m in got["messages"]]
    assert len(pairs) == 14
    written = {i for i, r in enumerate(answers) if r.status_code == 201}
    assert sorted(pairs) == sorted([i, k] for i in written for k in (0, 1))
    # each push's two messages are adjacent: nothing interleaves inside one push
    assert all(pairs[j][0] == pairs[j + 1][0] for j in range(0, 14, 2))


async def test_a_sweep_call_takes_one_bounded_batch_in_name_order(client: Queen,
                                                                  core_db: Database) -> None:
    """eph_sweep handles at most `limit` queues after `after`, in name order, and answers
    where the next batch starts (NULL once a batch came back short): a sweep call stays
    short however many queues are due, and the sweeper goes on from there."""
    prefix = "~~" + uuid.uuid4().hex[:8]  # sorts after every other queue of the suite
    names = [prefix + s for s in "abc"]
    for name in names:  # a ttl makes a declared queue due on every sweep
        await client.ephemeral.configure(name, ttl_seconds=60)

    async def batch(after: str, limit: int) -> str | None:
        for _ in range(200):  # the broker's own sweep may hold the sweep's lock a moment
            async with core_db.session() as conn:
                row = await store.sweep(conn, idle_seconds=300, channel=CHANNEL,
                                        after=after, limit=limit)
            if row.woken is not None:
                return row.last_queue
            await asyncio.sleep(0.05)
        raise AssertionError("the sweep's lock was never free")
    try:
        assert await batch(prefix, 2) == names[1]
        assert await batch(names[1], 2) is None  # names[2] alone: the end
        assert await batch(prefix, 3) == names[2]
        assert await batch(names[2], 3) is None
    finally:
        for name in names:
            await client.ephemeral.delete(name)
