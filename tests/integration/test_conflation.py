"""Conflation (wire-protocol-extensions §20.1-20.4): last-value delivery for a consumer group,
the stored policy, never 204, and the ack rules on a conflated lease; the official client's
`conflation()` consume flow end to end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from queen import Queen

from core.engine.pop import PopRequest
from core.storage.database import Database
from tests.support import (
    BrokerProcess,
    configure,
    core_reader,
    cursor_row,
    dlq_rows,
    expire_leases_of,
    push_items,
)

POP_MAINTENANCE = "/api/v1/system/maintenance/pop"


async def pop(client: httpx.AsyncClient, queue: str, *, partition: str | None = None,
              **params: object) -> httpx.Response:
    path = f"/api/v1/pop/queue/{queue}" + (f"/partition/{partition}" if partition else "")
    query = {"wait": "false", **{k: str(v).lower() if isinstance(v, bool) else str(v)
                                 for k, v in params.items()}}
    return await client.get(path, params=query)


async def fill(client: httpx.AsyncClient, queue: str, partitions: int, per: int) -> None:
    """`per` updates to each of `partitions` partitions p0.., transactionIds `<p>-<i>`."""
    for p in range(partitions):
        await push_items(client, queue, [{"p": p, "n": i} for i in range(per)],
                         partition=f"p{p}", prefix=f"p{p}-")


async def subscription(db: asyncpg.Connection, queue: str, group: str) -> asyncpg.Record | None:
    return await db.fetchrow(
        """SELECT s.mode, s.conflation FROM queen.consumer_subscriptions s
             JOIN queen.queues q ON q.id = s.queue_id
            WHERE q.name = $1 AND s.consumer_group = $2""", queue, group)


async def test_official_client_conflating_consumer_gets_the_newest_per_partition(
        broker: BrokerProcess, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    # 1,000 updates to 10 keys (partitions).
    await fill(http, queue_name, 10, 100)
    seen: list[dict[str, Any]] = []
    done = asyncio.Event()

    async def handler(messages: Any) -> None:
        seen.extend(messages if isinstance(messages, list) else [messages])
        if len(seen) >= 10:
            done.set()

    async with Queen(broker.url) as client:
        builder = client.queue(queue_name).group("latest").conflation().timeout_millis(500)
        await asyncio.wait_for(builder.consume(handler, signal=done), 30)
    assert sorted((m["partition"], m["data"]["n"]) for m in seen) == [
        (f"p{p}", 99) for p in range(10)]
    # The acks committed each partition to its tail: the superseded updates are retired.
    for p in range(10):
        row = await cursor_row(db, queue_name, "latest", f"p{p}")
        assert row is not None and (row["committed"], row["worker_id"]) == (99, None)
    r = await http.get(f"/api/v1/resources/queues/{queue_name}/depth",
                       params={"group": "latest"})
    assert (r.json()["conflation"], r.json()["pending"], r.json()["effectivePending"]) == (
        True, 0, 0)
    # Nothing older comes back; a plain group on the same queue still sees all 1,000.
    r = await pop(http, queue_name, consumerGroup="latest", conflation=True, batch=10)
    assert r.status_code == 200 and r.json()["messages"] == []
    plain = await pop(http, queue_name, consumerGroup="all", batch=1000, partitions=10)
    assert len(plain.json()["messages"]) == 1000 and "conflation" not in plain.json()


async def test_conflated_pop_leases_the_span_and_ack_commits_the_tail(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await fill(http, queue_name, 1, 4)
    r = await pop(http, queue_name, consumerGroup="g", conflation=True)
    body = r.json()
    assert r.status_code == 200 and body["conflation"] is True
    [m] = body["messages"]
    assert (m["transactionId"], body["partitionsClaimed"]) == ("p0-3", 1)
    row = await cursor_row(db, queue_name, "g", "p0")
    assert row is not None and (row["committed"], row["batch_end"]) == (-1, 3)
    ack = await http.post("/api/v1/ack", json={
        "transactionId": m["transactionId"], "partitionId": m["partitionId"],
        "status": "completed", "consumerGroup": "g", "leaseId": m["leaseId"]})
    [item] = ack.json()
    assert (item["success"], item["leaseReleased"], item["conflated"]) == (True, True, 3)
    row = await cursor_row(db, queue_name, "g", "p0")
    assert row is not None and (row["committed"], row["worker_id"]) == (3, None)


async def test_conflation_width_and_batch_bound_a_pop(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await fill(http, queue_name, 5, 2)
    # Without partitions and autopilot the width is the batch; messages stay within batch.
    r = await pop(http, queue_name, consumerGroup="g", conflation=True, batch=3)
    assert (r.json()["partitionsClaimed"], len(r.json()["messages"])) == (3, 3)
    assert {m["data"]["n"] for m in r.json()["messages"]} == {1}
    # partitions given: the width; batch 1 still bounds the messages.
    r = await pop(http, queue_name, consumerGroup="h", conflation=True, batch=1,
                  partitions=4)
    assert (r.json()["partitionsClaimed"], len(r.json()["messages"])) == (1, 1)
    r = await pop(http, queue_name, consumerGroup="h", conflation=True, batch=10,
                  partitions=1000)
    assert r.json()["partitionsClaimed"] == 4  # the 4 left (one is leased by the pop above)


async def test_conflating_pop_never_answers_204(
        http: httpx.AsyncClient, queue_name: str) -> None:
    empty = {"success": True, "messages": [], "partitionsClaimed": 0, "leaseId": "",
             "conflation": True}
    r = await pop(http, queue_name, consumerGroup="g", conflation=True)  # unknown queue
    assert r.status_code == 200 and empty.items() <= r.json().items(), r.text
    await fill(http, queue_name, 1, 1)
    r = await pop(http, queue_name, consumerGroup="g", conflation=True)
    assert len(r.json()["messages"]) == 1
    # Leased: nothing to deliver, and a long poll that times out answers 200 too.
    r = await pop(http, queue_name, consumerGroup="g", conflation=True, wait=True,
                  timeout=200)
    assert r.status_code == 200 and empty.items() <= r.json().items(), r.text
    # A pop of the conflating group that does not declare it: 200 as well.
    r = await pop(http, queue_name, consumerGroup="g")
    assert r.status_code == 200 and empty.items() <= r.json().items(), r.text
    r = await pop(http, queue_name, partition="p0", consumerGroup="g")
    assert r.status_code == 200 and empty.items() <= r.json().items(), r.text
    r = await http.get("/api/v1/pop", params={"namespace": queue_name, "consumerGroup": "g",
                                               "conflation": "true"})
    assert r.status_code == 200 and r.json()["conflation"] is True
    # A plain group still gets its 204 once it has nothing to take.
    r = await pop(http, queue_name, consumerGroup="plain")
    assert r.status_code == 200 and "conflation" not in r.json()
    r = await pop(http, queue_name, consumerGroup="plain")
    assert r.status_code == 204


@pytest.mark.parametrize("params", [
    {"conflation": True},
    {"conflation": True, "consumerGroup": ""},
    {"conflation": True, "consumerGroup": "__QUEUE_MODE__"},
    {"conflation": True, "consumerGroup": "g", "autoAck": True},
])
async def test_refusals_change_nothing(http: httpx.AsyncClient, db: asyncpg.Connection,
                                       queue_name: str, params: dict[str, object]) -> None:
    await fill(http, queue_name, 1, 2)
    for partition in (None, "p0"):
        r = await pop(http, queue_name, partition=partition, **params)
        assert r.status_code == 400 and "conflation" in r.json()["error"], r.text
    r = await http.get("/api/v1/pop", params={
        "namespace": queue_name, **{k: str(v).lower() if isinstance(v, bool) else str(v)
                                    for k, v in params.items()}})
    assert r.status_code == 400 and "conflation" in r.json()["error"], r.text
    assert await db.fetchval(
        """SELECT count(*) FROM queen.log_consumers c JOIN queen.log_partitions p
             ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id
            WHERE q.name = $1""", queue_name) == 0
    assert await subscription(db, queue_name, "g") is None


async def test_stored_policy_wins(http: httpx.AsyncClient, db: asyncpg.Connection,
                                  queue_name: str) -> None:
    await fill(http, queue_name, 1, 3)
    # "lv" registers conflating (on the partition route); "plain" registers plain.
    r = await pop(http, queue_name, partition="p0", consumerGroup="lv", conflation=True)
    assert r.json()["conflation"] is True
    sub = await subscription(db, queue_name, "lv")
    assert sub is not None and (sub["mode"], sub["conflation"]) == (None, True)
    await expire_leases_of(db, queue_name)
    r = await pop(http, queue_name, consumerGroup="lv", batch=10)  # does not declare
    assert r.json()["conflation"] is True
    assert [m["transactionId"] for m in r.json()["messages"]] == ["p0-2"]
    # The group's first wildcard pop stored its first-contact choice on the same record.
    sub = await subscription(db, queue_name, "lv")
    assert sub is not None and (sub["mode"], sub["conflation"]) == ("all", True)

    r = await pop(http, queue_name, consumerGroup="plain", batch=1)
    assert r.status_code == 200 and "conflation" not in r.json()
    await expire_leases_of(db, queue_name)
    r = await pop(http, queue_name, consumerGroup="plain", conflation=True, batch=10)
    body = r.json()
    assert body["conflationConflict"] is True and "conflation" not in body
    assert [m["transactionId"] for m in body["messages"]] == ["p0-0", "p0-1", "p0-2"]
    ack = [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
            "status": "completed", "leaseId": m["leaseId"]} for m in body["messages"]]
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": ack,
                                                    "consumerGroup": "plain"})
    assert all(item["success"] for item in r.json()), r.text
    # Empty, the declaring pop of the plain group still answers 200 with the conflict key.
    r = await pop(http, queue_name, consumerGroup="plain", conflation=True)
    assert r.status_code == 200 and r.json()["conflationConflict"] is True
    assert r.json()["messages"] == []
    # Deleting the group's record forgets the policy: it registers again.
    r = await http.delete(f"/api/v1/consumer-groups/plain/queues/{queue_name}",
                          params={"deleteMetadata": "true"})
    assert r.status_code == 200, r.text
    r = await pop(http, queue_name, consumerGroup="plain", conflation=True)
    assert r.json()["conflation"] is True
    assert [m["transactionId"] for m in r.json()["messages"]] == ["p0-2"]


async def test_failed_retries_then_dead_letters_the_delivered_message(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, retryLimit=1, retryDelay=0)
    await fill(http, queue_name, 1, 3)

    async def pop_and_fail() -> dict[str, Any]:
        r = await pop(http, queue_name, consumerGroup="g", conflation=True)
        [m] = r.json()["messages"]
        ack = await http.post("/api/v1/ack", json={
            "transactionId": m["transactionId"], "partitionId": m["partitionId"],
            "status": "failed", "error": "boom", "consumerGroup": "g",
            "leaseId": m["leaseId"]})
        [item] = ack.json()
        assert item["success"] is True and item["leaseReleased"] is True
        return {"txn": m["transactionId"], "dlq": item["dlq"]}

    assert await pop_and_fail() == {"txn": "p0-2", "dlq": False}  # a retry left
    row = await cursor_row(db, queue_name, "g", "p0")
    assert row is not None and (row["committed"], row["retry_count"]) == (-1, 1)
    assert await pop_and_fail() == {"txn": "p0-2", "dlq": True}  # exhausted
    row = await cursor_row(db, queue_name, "g", "p0")
    assert row is not None and (row["committed"], row["retry_count"]) == (2, 0)
    dead = await dlq_rows(db, queue_name)
    assert [(d["transaction_id"], d["error_message"]) for d in dead] == [("p0-2", "boom")]
    r = await pop(http, queue_name, consumerGroup="g", conflation=True)
    assert r.json()["messages"] == []


async def test_lease_expiry_redelivers_the_then_newest(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await fill(http, queue_name, 1, 2)
    r = await pop(http, queue_name, consumerGroup="g", conflation=True)
    assert [m["transactionId"] for m in r.json()["messages"]] == ["p0-1"]
    stale = r.json()["messages"][0]
    await push_items(http, queue_name, [{"late": True}], partition="p0", prefix="late-")
    assert await expire_leases_of(db, queue_name) == 1
    r = await pop(http, queue_name, consumerGroup="g", conflation=True)
    [m] = r.json()["messages"]
    assert m["transactionId"] == "late-0"
    row = await cursor_row(db, queue_name, "g", "p0")
    assert row is not None and (row["committed"], row["batch_end"]) == (-1, 2)
    # The expired holder's ack is refused; the live one commits the tail.
    ack = await http.post("/api/v1/ack", json={
        "transactionId": stale["transactionId"], "partitionId": stale["partitionId"],
        "status": "completed", "consumerGroup": "g", "leaseId": stale["leaseId"]})
    assert ack.json()[0]["success"] is False
    ack = await http.post("/api/v1/ack", json={
        "transactionId": m["transactionId"], "partitionId": m["partitionId"],
        "status": "completed", "consumerGroup": "g", "leaseId": m["leaseId"]})
    assert (ack.json()[0]["success"], ack.json()[0]["conflated"]) == (True, 2)


async def test_transaction_ack_commits_the_tail(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await fill(http, queue_name, 2, 3)
    r = await pop(http, queue_name, consumerGroup="g", conflation=True, partitions=2,
                  batch=10)
    messages = r.json()["messages"]
    assert sorted(m["transactionId"] for m in messages) == ["p0-2", "p1-2"]
    lease = r.json()["leaseId"]
    r = await http.post("/api/v1/transaction", json={
        "operations": [{"type": "push", "items": [{"queue": queue_name + "-out",
                                                   "payload": {"seen": 2}}]}] + [
            {"type": "ack", "transactionId": m["transactionId"],
             "partitionId": m["partitionId"], "status": "completed", "consumerGroup": "g",
             "leaseId": lease} for m in messages],
        "requiredLeases": [lease]})
    assert r.json()["success"] is True, r.text
    for p in ("p0", "p1"):
        row = await cursor_row(db, queue_name, "g", p)
        assert row is not None and (row["committed"], row["worker_id"]) == (2, None)


async def test_depth_reports_the_stored_policy(http: httpx.AsyncClient,
                                               queue_name: str) -> None:
    await fill(http, queue_name, 3, 4)
    await pop(http, queue_name, partition="p0", consumerGroup="lv", conflation=True)
    await pop(http, queue_name, partition="p0", consumerGroup="plain")
    depth = f"/api/v1/resources/queues/{queue_name}/depth"
    lv = (await http.get(depth, params={"group": "lv"})).json()
    assert (lv["conflation"], lv["pending"], lv["partitionsPending"],
            lv["effectivePending"]) == (True, 12, 3, 3)
    plain = (await http.get(depth, params={"group": "plain"})).json()
    assert (plain["conflation"], plain["effectivePending"]) == (False, 12)
    anyone = (await http.get(depth)).json()
    assert (anyone["conflation"], anyone["effectivePending"]) == (False, 12)


async def test_group_list_shows_the_flag(http: httpx.AsyncClient, queue_name: str) -> None:
    await fill(http, queue_name, 1, 1)
    await pop(http, queue_name, consumerGroup="lv", conflation=True)
    await pop(http, queue_name, consumerGroup="plain")
    flags = {g["name"]: g["conflation"] for g in (await http.get(
        "/api/v1/consumer-groups")).json() if g["queueName"] == queue_name}
    assert flags == {"lv": True, "plain": False}


@pytest.mark.parametrize("params", [
    {"conflation": "yes"}, {"conflation": "1x"}, {"conflation": "TRUE!"},
    {"partitions": "0"}, {"partitions": "-3"}, {"batch": "0"},
    {"conflation": "true", "consumerGroup": "g\x00x"},
])
async def test_hostile_parameters_are_400s(http: httpx.AsyncClient, db: asyncpg.Connection,
                                           queue_name: str, params: dict[str, str]) -> None:
    await fill(http, queue_name, 1, 1)
    query = {"consumerGroup": "g", **params}
    r = await http.get(f"/api/v1/pop/queue/{queue_name}", params=query)
    assert r.status_code == 400, r.text
    assert await subscription(db, queue_name, "g") is None


# --- pop maintenance: a broker of its own (one worker: the switch is seen at once) ---------

@pytest.fixture(scope="module")
def solo(database_url: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(database_url, workers=1) as proc:
        yield proc


async def test_conflating_pop_in_pop_maintenance_answers_paused(
        solo: BrokerProcess, queue_name: str) -> None:
    async with httpx.AsyncClient(base_url=solo.url, timeout=30) as client:
        await fill(client, queue_name, 1, 2)
        await pop(client, queue_name, consumerGroup="lv", conflation=True)  # registers
        assert (await client.post(POP_MAINTENANCE, json={"enabled": True})).status_code == 200
        try:
            for params in ({"consumerGroup": "lv", "conflation": True},
                           {"consumerGroup": "lv"},
                           {"consumerGroup": "new", "conflation": True},
                           {"consumerGroup": "lv", "wait": True, "timeout": 100}):
                r = await pop(client, queue_name, **params)
                assert r.status_code == 200, (params, r.text)
                assert (r.json()["paused"], r.json()["conflation"], r.json()["messages"]) == (
                    True, True, []), params
            assert (await pop(client, queue_name, consumerGroup="plain")).status_code == 204
        finally:
            await client.post(POP_MAINTENANCE, json={"enabled": False})


# --- concurrent conflating pops of one process (core/engine/ready: disjoint candidates) ----

async def test_concurrent_conflating_pops_of_one_process_take_disjoint_partitions(
        core_db: Database, http: httpx.AsyncClient, db: asyncpg.Connection,
        queue_name: str) -> None:
    await fill(http, queue_name, 4, 3)
    reader = core_reader(core_db)
    request = PopRequest(group="g", batch=10, queue=queue_name, conflation=True,
                         conflation_width=1)
    await reader.pop(PopRequest(group="g", batch=1, queue=queue_name, partition="none",
                                conflation=True))  # registers the policy, claims nothing
    results = await asyncio.gather(*(reader.pop(request) for _ in range(6)))
    delivered = [(c.partition, c.start, c.end, r.lease_id) for r in results for c in r.claims]
    # One partition per pop (width 1), its newest message, each under its own lease.
    assert sorted(d[:3] for d in delivered) == [(f"p{p}", 2, 2) for p in range(4)]
    assert len({d[3] for d in delivered}) == 4
    assert all(r.conflation for r in results if r.claims)
    sub = await subscription(db, queue_name, "g")
    assert sub is not None and sub["conflation"] is True
    for p in range(4):
        row = await cursor_row(db, queue_name, "g", f"p{p}")
        assert row is not None and (row["committed"], row["batch_end"]) == (-1, 2)


async def test_concurrent_long_polls_of_a_conflating_group_on_one_worker(
        solo: BrokerProcess, queue_name: str) -> None:
    async with httpx.AsyncClient(base_url=solo.url, timeout=30) as client:
        await pop(client, queue_name, consumerGroup="g", conflation=True)  # registers
        polls = [asyncio.create_task(pop(client, queue_name, consumerGroup="g",
                                         conflation=True, wait=True, timeout=3000, batch=1))
                 for _ in range(6)]
        await asyncio.sleep(0.3)  # parked
        await fill(client, queue_name, 4, 3)
        answers = [r.json() for r in await asyncio.gather(*polls)]
    assert all(a["conflation"] is True for a in answers)
    got = sorted((m["partition"], m["data"]["n"]) for a in answers for m in a["messages"])
    assert got == sorted(set(got))  # no partition twice
    assert all(n == 2 for _, n in got) and got
