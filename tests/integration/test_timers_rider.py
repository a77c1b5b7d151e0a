"""The `timers` transaction rider (extensions §17): timer ops committed in one database
transaction with pushes, acks and the `kv` rider, through the official client's
`transaction()...timer(...)`; a refused bundle leaves nothing (a digest of every table);
hostile rider input answers 400 and changes nothing; a rider's timer fires later as a normal
message (the firer runs as its own process beside the session's broker)."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from queen import Queen

from tests.support import BrokerProcess, fetch_records, schema_snapshot, wait_for
from tests.timer_support import FirerProcess

B64 = base64.b64encode(b'{"a": 1}').decode()
TX = "/api/v1/transaction"


@pytest.fixture
async def queen(broker: BrokerProcess) -> AsyncIterator[Queen]:
    async with Queen(broker.url) as client:
        yield client


@pytest.fixture(scope="module")
def firer(database_url: str, broker: BrokerProcess) -> Iterator[FirerProcess]:
    with FirerProcess(database_url) as proc:
        yield proc


def _schedule(queue: str, key: str, **fields: Any) -> dict[str, Any]:
    return {"op": "schedule", "queue": queue, "timerKey": key, "delayMs": 3_600_000,
            "txn": f"txn-{key}", "payload": B64, **fields}


async def _tables(db: asyncpg.Connection) -> dict[str, str]:
    """Every table's digest; sequences left out (a rolled-back nextval is not given back,
    and versions are never reused anyway)."""
    return {name: digest for name, digest in (await schema_snapshot(db)).items()
            if ":" in digest}


async def _timers(db: asyncpg.Connection, queue: str) -> dict[str, asyncpg.Record]:
    rows = await db.fetch("SELECT * FROM queen.timers WHERE queue = $1", queue)
    return {r["timer_key"]: r for r in rows}


async def test_push_ack_kv_and_timers_commit_together_in_one_flat_answer(
        queen: Queen, db: asyncpg.Connection, queue_name: str) -> None:
    ns = "txt-" + uuid.uuid4().hex[:10]
    later = f"{queue_name}-later"
    await queen.queue(queue_name).push([{"data": {"n": 0}}])
    [message] = await queen.queue(queue_name).batch(1).wait(False).pop()
    # Pending already: the bundle's cancel finds it, its reschedule replaces it.
    await queen.timers.schedule(later, "old", {"x": 0}, delay_ms=3_600_000)
    await queen.timers.schedule(later, "again", {"x": 0}, delay_ms=3_600_000)
    answer = await (queen.transaction().ack(message)
                    .queue(queue_name).push([{"data": {"n": 1}}])
                    .kv.put(ns, "k", "v", ttl_seconds=60)
                    .timer(later).key("new").payload({"x": 1}).after_ms(3_600_000)
                    .txn("tx-new").schedule()
                    .timer(later).key("again").payload({"x": 2}).after_ms(3_600_000)
                    .reschedule()
                    .timer(later).key("old").cancel()
                    .timer(later).key("never").cancel()
                    .commit())
    assert answer["success"] is True, answer
    results = answer["results"]
    assert [(r["type"], r["index"]) for r in results] == [
        ("ack", 0), ("push", 1), ("kv", 2), ("timer", 3), ("timer", 4), ("timer", 5),
        ("timer", 6)]
    timers = results[3:]
    assert [t["opIndex"] for t in timers] == [0, 1, 2, 3]
    assert [(t["status"], t["ok"], t["timerKey"]) for t in timers] == [
        ("scheduled", True, "new"), ("rescheduled", True, "again"),
        ("cancelled", True, "old"), ("absent", False, "never")]
    assert timers[0]["txn"] == "tx-new" and timers[0]["queue"] == later
    assert timers[0]["messageId"] and timers[0]["deliverAt"].endswith("Z")
    rows = await _timers(db, later)
    assert sorted(rows) == ["again", "new"]
    assert json.loads(rows["again"]["payload"]) == {"x": 2}
    # One instant: the timers' deliverAt and the KV row's write are the transaction's now().
    kv_at = await db.fetchval("SELECT updated_at FROM queen.kv WHERE ns = $1", ns)
    assert rows["new"]["updated_at"] == kv_at
    assert (await queen.kv.get(ns, "k"))["value"] == "v"
    assert await queen.queue(queue_name).batch(5).wait(False).pop() != []  # the pushed one


async def test_a_refused_bundle_leaves_no_timer_no_kv_write_no_push(
        queen: Queen, db: asyncpg.Connection, queue_name: str) -> None:
    ns = "txt-" + uuid.uuid4().hex[:10]
    await queen.queue(queue_name).push([{"data": 1}])
    [message] = await queen.queue(queue_name).batch(1).wait(False).pop()
    await queen.timers.schedule(queue_name, "pending", {"x": 0}, delay_ms=3_600_000)
    bogus = {**message, "leaseId": "00000000-0000-0000-0000-000000000000"}
    before = await _tables(db)
    # A refused ack (§4.7) rolls the whole bundle back.
    with pytest.raises(Exception, match="rejected"):
        await (queen.transaction().ack(bogus).queue(queue_name).push([{"data": 2}])
               .kv.put(ns, "k", "v", ttl_seconds=60)
               .timer(queue_name).key("t1").payload({"a": 1}).after_ms(0).schedule()
               .timer(queue_name).key("pending").cancel().commit())
    # A lost required KV precondition rolls it back too, answered 200 with its fields.
    lost = await (queen.transaction().queue(queue_name).push([{"data": 3}])
                  .kv.check(ns, "absent-key", expect=7, required=True)
                  .timer(queue_name).key("t2").payload({"a": 2}).after_ms(0).schedule()
                  .commit())
    assert lost["success"] is False and lost["reason"] == "kv_precondition"
    assert lost["failedIndex"] == 1 and lost["results"] == []
    assert await _tables(db) == before


async def test_a_timer_committed_by_a_transaction_fires_later_as_a_normal_message(
        firer: FirerProcess, queen: Queen, http: httpx.AsyncClient,
        queue_name: str) -> None:
    source = f"{queue_name}-src"
    answer = await (queen.transaction().queue(source).push([{"data": {"order": 7}}])
                    .timer(queue_name).key("order:7:expire").payload({"expire": 7})
                    .after_ms(300).txn("expire-7").schedule().commit())
    assert answer["success"] is True, answer
    timer = answer["results"][1]
    assert (timer["type"], timer["status"]) == ("timer", "scheduled")

    async def fired() -> list[dict[str, Any]] | None:
        r = await http.get(f"/api/v1/resources/queues/{queue_name}")
        if r.status_code == 404:
            return None
        records = (await fetch_records(http, queue_name))["records"]
        return list(records) or None
    [record] = await wait_for(fired, timeout=30, interval=0.1)
    assert record["transactionId"] == "expire-7"
    assert record["payload"] == {"expire": 7}
    assert (await queen.timers.peek(queue_name, "order:7:expire"))["found"] is False


def _hostile(q: str) -> list[tuple[Any, str]]:
    push = {"type": "push", "items": [{"queue": q, "payload": {"p": 1}}]}
    return [
        ({"operations": [push], "timers": {"op": "schedule"}}, "timers_bad_body"),
        ({"operations": [push], "timers": "x"}, "timers_bad_body"),
        ({"operations": [push], "timers": None}, "timers_bad_body"),
        ({"operations": [push], "timers": 5}, "timers_bad_body"),
        ({"timers": [_schedule(q, "a"), 3]}, "timers_bad_op"),
        ({"operations": [push], "timers": [_schedule(q, "a"), _schedule(q, "a")]},
         "timers_duplicate_key"),
        ({"timers": [_schedule(q, "a"), {"op": "cancel", "queue": q, "timerKey": "a"}]},
         "timers_duplicate_key"),
        ({"operations": [push], "timers": [_schedule(q, "a", delayMs="5")]}, "timers_bad_op"),
        ({"operations": [push], "timers": [_schedule(q, "a", payload=7)]},
         "timers_payload_not_base64"),
        ({"operations": [push], "timers": [_schedule(q, "a", txn=None)]},
         "timers_txn_required"),
        ({"operations": [push], "timers": [_schedule(q, "a", producerSub="me")]},
         "timers_server_owned_field"),
        ({"operations": [push], "timers": [_schedule(q, "a", op="later")]},
         "timers_unknown_op"),
        ({"operations": [push], "kv": [{"op": "put", "ns": "a", "key": "k", "value": 1,
                                         "forever": True}],
          "timers": [_schedule(q, "a", timerKey="")]}, "timers_key_required"),
    ]


async def test_hostile_timers_rider_answers_400_and_changes_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    before = await _tables(db)
    for body, reason in _hostile(queue_name):
        r = await http.post(TX, json=body)
        label = json.dumps(body)[:120]
        assert r.status_code == 400, (label, r.text)
        answer = r.json()
        # The transaction's failure shape, the code as `error`, with `reason` and `detail`.
        assert answer["success"] is False and answer["results"] == [], (label, answer)
        assert (answer["error"], answer["reason"]) == ("timers_bad_request", reason), label
        assert answer["detail"].startswith("timers"), (label, answer)
    assert await _tables(db) == before


async def test_the_rider_has_no_op_cap_payload_ceiling_or_horizon_and_needs_no_operations(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    big = base64.b64encode(json.dumps({"b": "x" * (1024 * 1024 + 10)}).encode()).decode()
    ops = [_schedule(queue_name, f"k{i}") for i in range(300)]
    ops[0] = _schedule(queue_name, "k0", payload=big, delayMs=100 * 86400 * 1000)
    r = await http.post(TX, json={"timers": ops})
    assert r.status_code == 200, r.text[:300]
    results = r.json()["results"]
    assert len(results) == 300 and {e["status"] for e in results} == {"scheduled"}
    assert [e["index"] for e in results] == list(range(300))
    assert len(await _timers(db, queue_name)) == 300
