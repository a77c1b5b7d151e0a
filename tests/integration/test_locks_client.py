"""Locks and semaphores (extensions §15) and the `kv` transaction rider (§17) through the
official client: `client.lock`, `client.semaphore`, `client.locks`, `transaction().kv`,
`.guard(lock)` and `.once()`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from queen import Queen

from tests.support import BrokerProcess, queue_counts


@pytest.fixture
async def queen(broker: BrokerProcess) -> AsyncIterator[Queen]:
    async with Queen(broker.url) as client:
        yield client


@pytest.fixture
def name() -> str:
    return "lock-" + uuid.uuid4().hex[:12]


async def _permit(db: asyncpg.Connection, key: str) -> asyncpg.Record | None:
    return await db.fetchrow("SELECT value, version, expires_at > now() AS live "
                             "FROM queen.kv WHERE ns = 'queen-locks' AND key = $1", key)


async def _expire_permit(db: asyncpg.Connection, key: str) -> None:
    await db.execute("UPDATE queen.kv SET expires_at = now() - interval '1 second' "
                     "WHERE ns = 'queen-locks' AND key = $1", key)


async def test_a_lock_is_a_kv_row_and_its_token_the_rows_version(
        queen: Queen, name: str, db: asyncpg.Connection) -> None:
    lock = queen.lock(name, ttl_seconds=30)
    assert await lock.acquire() is True
    row = await _permit(db, f"{name}#0")
    assert row is not None and row["version"] == lock.token and row["live"]
    via_kv = await queen.kv.get("queen-locks", f"{name}#0")
    assert via_kv["version"] == lock.token and via_kv["value"] == {"owner": lock.owner}
    other = queen.lock(name, ttl_seconds=30)
    assert await other.acquire() is False
    held = await queen.locks.get(name)
    assert held["held"] is True
    assert [(h["slot"], h["owner"], h["token"]) for h in held["holders"]] == [
        (0, lock.owner, lock.token)]
    refused = await queen.locks.acquire(name, ttl_seconds=30, owner="someone-else")
    assert refused["acquired"] is False and refused["reason"] == "held"
    assert refused["holders"] == [{"slot": 0, "owner": lock.owner}]
    again = await queen.locks.acquire(name, ttl_seconds=30, owner=lock.owner)
    assert again["acquired"] is True and again["already"] is True
    assert again["token"] == lock.token
    assert again["guard"] == {"op": "check", "ns": "queen-locks", "key": f"{name}#0",
                              "expect": lock.token, "required": True}
    assert await lock.release() is True
    assert await _permit(db, f"{name}#0") is None
    assert await other.acquire() is True
    await other.release()


async def test_auto_renew_moves_the_token_and_keeps_the_lock(
        queen: Queen, name: str, db: asyncpg.Connection) -> None:
    lock = queen.lock(name, ttl_seconds=3, renew_every=0.5)
    assert await lock.acquire()
    first = lock.token
    assert first is not None
    for _ in range(100):
        await asyncio.sleep(0.1)
        if lock.token not in (None, first):
            break
    renewed = lock.token
    assert renewed is not None and renewed > first
    row = await _permit(db, f"{name}#0")
    assert row is not None and row["version"] == renewed
    assert '"since"' in row["value"]  # a renew records when the hold began
    stale = await queen.locks.renew(name, token=first, ttl_seconds=3)
    assert stale["renewed"] is False and stale["reason"] == "lost"
    assert await lock.release() is True


async def test_takeover_after_expiry_and_the_old_holders_guarded_bundle_commits_nothing(
        queen: Queen, name: str, db: asyncpg.Connection, queue_name: str) -> None:
    old = queen.lock(name, ttl_seconds=30, auto_renew=False)
    assert await old.acquire()
    await _expire_permit(db, f"{name}#0")  # the old holder paused past its lifetime
    new = queen.lock(name, ttl_seconds=30, auto_renew=False)
    assert await new.acquire() is True
    assert new.token is not None and old.token is not None and new.token > old.token
    answer = await (queen.transaction().guard(old).queue(queue_name).push([{"data": 1}])
                    .kv.put("app", f"{name}-state", "old", ttl_seconds=60).commit())
    assert not answer
    assert answer["reason"] == "kv_precondition" and answer["kvReason"] == "version"
    assert answer["failedIndex"] == 1  # one pushed item, then the guard
    assert answer["value"] == {"owner": new.owner} and answer["version"] == new.token
    assert old.lost.is_set()
    assert (await queue_counts(db, queue_name))["segments"] == 0
    assert not await queen.kv.get("app", f"{name}-state")
    committed = await (queen.transaction().guard(new).queue(queue_name).push([{"data": 2}])
                       .kv.put("app", f"{name}-state", "new", ttl_seconds=60).commit())
    assert committed["success"] is True
    kinds = [(r["type"], r["index"]) for r in committed["results"]]
    assert kinds == [("push", 0), ("kv", 1), ("kv", 2)]
    assert committed["results"][1]["opIndex"] == 0 and committed["results"][2]["applied"]
    assert (await queen.kv.get("app", f"{name}-state"))["value"] == "new"
    await new.release()


async def test_a_semaphore_of_3_never_grants_more_than_3(queen: Queen, name: str) -> None:
    inside = 0
    most = 0
    granted = 0

    async def worker() -> None:
        nonlocal inside, most, granted
        sem = queen.semaphore(name, 3, ttl_seconds=30, auto_renew=False)
        if not await sem.acquire(wait=30):
            return
        granted += 1
        inside += 1
        most = max(most, inside)
        held = await queen.locks.get(name)
        assert len(held["holders"]) <= 3
        await asyncio.sleep(0.05)
        inside -= 1
        assert await sem.release() is True

    await asyncio.gather(*(worker() for _ in range(12)))
    assert most <= 3 and granted == 12


async def test_semaphore_slots_and_refusal(queen: Queen, name: str) -> None:
    answers = [await queen.locks.acquire(name, ttl_seconds=30, owner=f"o{i}", limit=2)
               for i in range(3)]
    assert [a["acquired"] for a in answers] == [True, True, False]
    assert sorted(a["slot"] for a in answers[:2]) == [0, 1]
    assert answers[2]["reason"] == "held"
    assert sorted(h["owner"] for h in answers[2]["holders"]) == ["o0", "o1"]
    repeat = await queen.locks.acquire(name, ttl_seconds=30, owner="o1", limit=2)
    assert repeat["already"] is True and repeat["slot"] == answers[1]["slot"]
    released = await queen.locks.release(name, token=answers[0]["token"],
                                         slot=answers[0]["slot"])
    assert released["released"] is True
    lost = await queen.locks.release(name, token=answers[0]["token"], slot=answers[0]["slot"])
    assert lost["released"] is False and lost["reason"] == "lost"


async def test_tx_once_gates_a_bundle_and_kv_rides_with_pushes(
        queen: Queen, db: asyncpg.Connection, queue_name: str) -> None:
    ns = "tx-" + uuid.uuid4().hex[:10]
    first = await (queen.transaction().once(ns, "msg-1", ttl_seconds=60)
                   .queue(queue_name).push([{"data": {"n": 1}}])
                   .kv.incr(ns, "count", delta=1, forever=True).commit())
    assert first["success"] is True
    assert [r["type"] for r in first["results"]] == ["push", "kv", "kv"]
    second = await (queen.transaction().once(ns, "msg-1", ttl_seconds=60)
                    .queue(queue_name).push([{"data": {"n": 2}}])
                    .kv.incr(ns, "count", delta=1, forever=True).commit())
    assert second["success"] is False and second["reason"] == "kv_precondition"
    assert second["kvReason"] == "exists" and second["failedIndex"] == 1
    assert second["results"] == [] and second["error"] == "kv_precondition_failed"
    assert (await queen.kv.get(ns, "count"))["value"] == 1
    assert (await queue_counts(db, queue_name))["segments"] == 1
    kv_only = await queen.transaction().kv.put(ns, "solo", 1, ttl_seconds=60).commit()
    assert kv_only["success"] is True and kv_only["results"][0]["opIndex"] == 0


async def test_a_refused_ack_rolls_the_kv_writes_back(
        queen: Queen, db: asyncpg.Connection, queue_name: str) -> None:
    ns = "tx-" + uuid.uuid4().hex[:10]
    await queen.queue(queue_name).push([{"data": 1}])
    [message] = await queen.queue(queue_name).batch(1).wait(False).pop()
    await queen.kv.put(ns, "kept", "before", ttl_seconds=60)
    bogus = {**message, "leaseId": "00000000-0000-0000-0000-000000000000"}
    # A required check that would also lose: the ack's refusal (§4.7) is answered first.
    with pytest.raises(Exception) as caught:
        await (queen.transaction().ack(bogus)
               .kv.put(ns, "kept", "after", ttl_seconds=60)
               .kv.incr(ns, "n", delta=1, forever=True)
               .kv.check(ns, "absent-key", expect=7, required=True).commit())
    assert "rejected" in str(caught.value) or "lease" in str(caught.value).lower()
    assert (await queen.kv.get(ns, "kept"))["value"] == "before"
    assert not await queen.kv.get(ns, "n")
    rows = await db.fetch("SELECT key FROM queen.kv WHERE ns = $1", ns)
    assert [r["key"] for r in rows] == ["kept"]


async def test_binary_transaction_carries_the_kv_rider_in_its_head(
        broker: BrokerProcess, db: asyncpg.Connection, queue_name: str) -> None:
    """The client in its binary mode sends the bundle as QTB1 (checked on the wire by
    `official_client`): the `kv` rider rides in the JSON head, its entries follow the
    pushes, and a lost `required` op rolls the pushes back."""
    from tests.client_modes import official_client

    ns = "bin-" + uuid.uuid4().hex[:10]
    async with official_client(broker.url, "binary-zstd") as client:
        answer = await (client.transaction().queue(queue_name).push([{"data": 1}, {"data": 2}])
                        .kv.put(ns, "k", "v", ttl_seconds=60).kv.get(ns, "k").commit())
        assert answer["success"] is True
        assert [(r["type"], r["index"]) for r in answer["results"]] == [
            ("push", 0), ("push", 1), ("kv", 2), ("kv", 3)]
        assert answer["results"][3]["value"] == "v" and answer["results"][3]["opIndex"] == 1
        lost = await (client.transaction().queue(queue_name).push([{"data": 3}])
                      .once(ns, "k", ttl_seconds=60).commit())
        assert lost["reason"] == "kv_precondition" and lost["failedIndex"] == 1
    assert (await queue_counts(db, queue_name))["segments"] == 1


async def test_a_kv_only_transaction_may_leave_operations_out(
        broker: BrokerProcess, db: asyncpg.Connection) -> None:
    import httpx

    ns = "tx-" + uuid.uuid4().hex[:10]
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
        r = await http.post("/api/v1/transaction", json={"kv": [
            {"op": "incr", "ns": ns, "key": "n", "delta": 2, "forever": True}]})
        assert r.status_code == 200, r.text
        [entry] = r.json()["results"]
        assert (entry["type"], entry["index"], entry["opIndex"], entry["value"]) == (
            "kv", 0, 0, 2)
        r = await http.post("/api/v1/transaction", json={})
        assert r.status_code == 400 and "operations array is required" in r.json()["error"]


async def test_renew_by_token_or_by_owner_and_lost_when_expired(
        queen: Queen, name: str, db: asyncpg.Connection) -> None:
    first = await queen.locks.acquire(name, ttl_seconds=30, owner="me")
    renewed = await queen.locks.renew(name, token=first["token"], ttl_seconds=30)
    assert renewed["renewed"] is True and renewed["token"] > first["token"]
    assert renewed["guard"]["expect"] == renewed["token"] and renewed["slot"] == 0
    # The answer of that renew was "lost": the owner's retry with the old token still renews.
    again = await queen.locks.renew(name, token=first["token"], ttl_seconds=30, owner="me")
    assert again["renewed"] is True and again["token"] > renewed["token"]
    stranger = await queen.locks.renew(name, token=first["token"], ttl_seconds=30,
                                       owner="other")
    assert stranger == {"index": 0, "op": "renew", "name": name, "renewed": False,
                        "reason": "lost", "slot": 0, "holders": [{"slot": 0, "owner": "me"}]}
    held = await queen.locks.get(name)
    [holder] = held["holders"]
    assert holder["token"] == again["token"] and holder["since"] <= holder["renewedAt"]
    await _expire_permit(db, f"{name}#0")
    gone = await queen.locks.renew(name, token=again["token"], ttl_seconds=30, owner="me")
    assert (gone["renewed"], gone["reason"], gone["holders"]) == (False, "lost", [])
    assert (await queen.locks.get(name))["held"] is False
