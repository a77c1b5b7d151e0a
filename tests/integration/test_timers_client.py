"""Timers (wire-protocol-extensions §16) through the official `queen-mq` 2.6.0 client, with
the firer running as its own process (`python -m core.timers.firer`) beside the session's
broker: a scheduled message is popped not before its due time; peek, list, count and
paging; cancel and reschedule racing the firer; failures backed off then dead-lettered."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from urllib.parse import quote

import asyncpg
import httpx
import pytest
from queen import Queen

from tests.support import BrokerProcess, fetch_records, wait_for
from tests.timer_support import FirerProcess


@pytest.fixture(scope="module")
def firer(database_url: str, broker: BrokerProcess) -> Iterator[FirerProcess]:
    with FirerProcess(database_url) as proc:
        yield proc


@pytest.fixture
async def queen(broker: BrokerProcess) -> AsyncIterator[Queen]:
    async with Queen(broker.url) as client:
        yield client


async def _delivered(http: httpx.AsyncClient, queue: str) -> list[dict]:  # type: ignore[type-arg]
    r = await http.get("/api/v1/resources/queues/" + quote(queue, safe=""))
    if r.status_code == 404:
        return []
    return list((await fetch_records(http, queue))["records"])


async def test_a_scheduled_message_is_popped_not_before_its_due_time(
        firer: FirerProcess, queen: Queen, http: httpx.AsyncClient, queue_name: str) -> None:
    result = await queen.timers.schedule(queue_name, "order:1:expire", {"orderId": 1},
                                         delay_ms=1500)
    assert result["ok"] is True and result["status"] == "scheduled"
    assert (result["queue"], result["timerKey"]) == (queue_name, "order:1:expire")
    assert result["deliverAt"].endswith("Z") and result["txn"] and result["messageId"]
    started = time.monotonic()
    # A long poll parked before the fire: the fire's wake-up must reach it.
    r = await http.get(f"/api/v1/pop/queue/{queue_name}",
                       params={"wait": "true", "timeout": "20000", "batch": "1"}, timeout=30)
    waited = time.monotonic() - started
    assert r.status_code == 200, r.text
    [message] = r.json()["messages"]
    assert message["data"] == {"orderId": 1}
    assert message["transactionId"] == result["txn"]
    assert message["id"] == result["messageId"]
    # Not before: the message was appended at or after deliverAt (both the database's clock).
    assert message["createdAt"] >= result["deliverAt"]
    assert waited < 15, waited  # liveness, not timing: a sweep runs at least every second
    assert (await queen.timers.peek(queue_name, "order:1:expire"))["found"] is False


async def test_peek_list_count_and_paging(firer: FirerProcess, queen: Queen,
                                          http: httpx.AsyncClient, queue_name: str) -> None:
    queue = f"{queue_name} é"  # percent-encoded whole by the client, decoded once here
    keys = ["b/2", "a/1", "a/10", "c%3", "a/2"]
    for i, key in enumerate(keys):
        done = await queen.timer(queue).key(key).payload({"n": i}).after_ms(3_600_000) \
            .partition("P1").txn(f"tx-{i}").schedule()
        assert done["status"] == "scheduled", done
    peeked = await queen.timers.peek(queue, "a/10")
    assert peeked["found"] is True and peeked["partition"] == "P1" and peeked["txn"] == "tx-2"
    assert json.loads(base64.b64decode(peeked["payload"])) == {"n": 2}
    assert (peeked["attempts"], peeked["lastError"], peeked["claimed"]) == (0, None, False)
    assert peeked["encrypted"] is False and peeked["producerSub"] is None
    first = await queen.timers.list(queue, limit=2)
    assert [r["timerKey"] for r in first["rows"]] == ["a/1", "a/10"]
    assert first["truncated"] is True and first["nextAfter"] == "a/10"
    assert "payload" not in first["rows"][0]
    every = await queen.timers.list_all(queue, limit=2)
    assert [r["timerKey"] for r in every] == sorted(keys)  # byte order
    last = await queen.timers.list(queue, after="b/2")
    assert ([r["timerKey"] for r in last["rows"]], last["truncated"], last["nextAfter"]) == \
        (["c%3"], False, None)
    counted = await http.get(f"/api/v1/timers/{quote(queue, safe='')}",
                             params={"mode": "count", "prefix": "a/"})
    assert counted.status_code == 200 and counted.json() == {"count": 3}
    again = await queen.timers.reschedule(queue, "a/1", {"n": 9}, delay_ms=3_600_000,
                                          txn="tx-new")
    assert again["status"] == "rescheduled" and again["txn"] == "tx-new"
    cancelled = await queen.timers.cancel(queue, "a/1")
    assert (cancelled["ok"], cancelled["status"], cancelled["txn"]) == (True, "cancelled",
                                                                         "tx-new")
    absent = await queen.timers.cancel(queue, "a/1", txn="tx-new")
    assert (bool(absent), absent["status"], absent["txn"]) == (False, "absent", "tx-new")
    summary = (await http.get("/api/v1/timers", params={"limit": 1000})).json()
    [mine] = [q for q in summary["queues"] if q["queue"] == queue]
    assert (mine["pending"], mine["failing"]) == (4, 0)
    # Nothing was pushed, and no queue was created by scheduling.
    assert (await http.get("/api/v1/resources/queues/" + quote(queue, safe=""))).status_code \
        == 404


async def test_peek_and_list_say_claimed_while_a_fire_holds_the_row(
        queen: Queen, db: asyncpg.Connection, queue_name: str) -> None:
    """`claimed` is true while a transaction holds the timer's row as a fire does (FOR
    UPDATE), in a peek and in a list, and false again once it lets go."""
    await queen.timer(queue_name).key("held").payload({"n": 1}).after_ms(3_600_000) \
        .schedule()
    await queen.timer(queue_name).key("free").payload({"n": 2}).after_ms(3_600_000) \
        .schedule()

    async def claimed() -> tuple[bool, dict[str, bool]]:
        peeked = await queen.timers.peek(queue_name, "held")
        listed = await queen.timers.list(queue_name)
        return peeked["claimed"], {r["timerKey"]: r["claimed"] for r in listed["rows"]}

    async with db.transaction():
        await db.execute("SELECT 1 FROM queen.timers WHERE queue = $1 AND timer_key = 'held' "
                         "FOR UPDATE", queue_name)
        assert await claimed() == (True, {"free": False, "held": True})
    assert await claimed() == (False, {"free": False, "held": False})


async def test_cancel_racing_the_firer_is_cancelled_xor_delivered_once(
        firer: FirerProcess, queen: Queen, http: httpx.AsyncClient, queue_name: str) -> None:
    n = 60
    scheduled = await queen.timers.batch([
        queen.timers.op.schedule(queue_name, f"k{i}", {"i": i}, delay_ms=400, txn=f"t{i}")
        for i in range(n)])
    assert [s["status"] for s in scheduled] == ["scheduled"] * n
    await asyncio.sleep(0.35)
    verdicts = await asyncio.gather(*(queen.timers.cancel(queue_name, f"k{i}", txn=f"t{i}")
                                      for i in range(n)))
    statuses = {v["status"] for v in verdicts}
    assert statuses <= {"cancelled", "absent", "too_late"}, statuses
    absent = {v["timerKey"] for v in verdicts if v["status"] != "cancelled"}

    async def settled() -> list[dict]:  # type: ignore[type-arg]
        pending = await queen.timers.list(queue_name)
        return [] if pending["rows"] else await _delivered(http, queue_name) or [{}]
    await wait_for(settled, timeout=20, interval=0.2)
    delivered = [r["transactionId"] for r in await _delivered(http, queue_name)]
    assert sorted(delivered) == sorted(f"t{k[1:]}" for k in absent)  # each once, no other


async def test_reschedule_racing_the_firer_replaces_or_follows_the_fired_one(
        firer: FirerProcess, queen: Queen, http: httpx.AsyncClient, queue_name: str) -> None:
    n = 40
    await queen.timers.batch([
        queen.timers.op.schedule(queue_name, f"k{i}", {"i": i}, delay_ms=400, txn=f"old{i}")
        for i in range(n)])
    await asyncio.sleep(0.35)
    again = await asyncio.gather(*(queen.timers.reschedule(
        queue_name, f"k{i}", {"i": i}, delay_ms=200, txn=f"new{i}") for i in range(n)))
    expected = []
    for i, verdict in enumerate(again):
        assert verdict["status"] in ("scheduled", "rescheduled"), verdict
        # rescheduled: the old timer was pending and is replaced; scheduled: it had fired.
        expected += [f"new{i}"] if verdict["status"] == "rescheduled" else [f"old{i}", f"new{i}"]

    async def all_in() -> bool:
        return len(await _delivered(http, queue_name)) >= len(expected)
    await wait_for(all_in, timeout=20, interval=0.2)
    await asyncio.sleep(0.5)  # nothing more may come
    delivered = [r["transactionId"] for r in await _delivered(http, queue_name)]
    assert sorted(delivered) == sorted(expected)


async def test_a_payload_that_is_not_json_backs_off_then_lands_in_the_dlq(
        firer: FirerProcess, queen: Queen, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    done = await queen.timers.schedule(queue_name, "bad", b"\xffnot json", delay_ms=0,
                                       txn="bad-txn")
    first = await wait_for(lambda: _failed_once(queen, queue_name), timeout=15)
    assert first["lastError"] == "payload is not one JSON document"
    # Backoff: 1 s, 2 s, 4 s, 8 s; time is moved by back-dating the row, not by sleeping.
    async def gone() -> bool:
        await db.execute("UPDATE queen.timers SET fire_at = now() - interval '1 second' "
                         "WHERE queue = $1", queue_name)
        return not (await queen.timers.peek(queue_name, "bad"))["found"]
    await wait_for(gone, timeout=30, interval=0.3)
    r = await http.get("/api/v1/dlq", params={"queue": queue_name})
    [letter] = r.json()["messages"]
    assert (letter["consumerGroup"], letter["offset"], letter["transactionId"],
            letter["retryCount"], letter["messageId"]) == \
        ("__timer__", -1, "bad-txn", 5, done["messageId"])
    assert letter["errorMessage"] == "payload is not one JSON document"
    assert base64.b64decode(letter["data"]) == b"\xffnot json"
    assert await _delivered(http, queue_name) == []


async def _failed_once(queen: Queen, queue: str) -> dict | None:  # type: ignore[type-arg]
    peeked = await queen.timers.peek(queue, "bad")
    return peeked if peeked.get("attempts", 0) >= 1 else None


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} missing")


async def test_metrics_count_scheduled_fired_and_fire_lag(
        firer: FirerProcess, queen: Queen, http: httpx.AsyncClient, queue_name: str) -> None:
    names = ("queen_timers_scheduled_total", "queen_timers_fired_total",
             "queen_timer_fire_lag_seconds_count", "queen_timers_dead_lettered_total")
    before_text = (await http.get("/metrics/prometheus")).text
    before = {n: _metric(before_text, n) for n in names}
    await queen.timers.batch([queen.timers.op.schedule(queue_name, f"m{i}", {"i": i},
                                                       delay_ms=0) for i in range(3)])

    async def counted() -> dict[str, float] | None:
        text = (await http.get("/metrics/prometheus")).text
        now = {n: _metric(text, n) for n in names}
        # Each process adds its counts every METRICS_FLUSH_MS: the worker that took the
        # schedule and the firer may show up in either order.
        grown = [now[n] - before[n] for n in names[:3]]
        return now if min(grown) >= 3 else None
    after = await wait_for(counted, timeout=20, interval=0.2)
    figures = (await http.get("/metrics")).json()["timers"]
    assert figures["fired"] >= after["queen_timers_fired_total"]
    assert figures["fireLagSecondsMean"] is not None and figures["pending"] >= 0
