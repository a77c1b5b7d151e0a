"""The five invariants of the read model, plus redelivery after a consumer dies (reaper).

1. Per-partition order within a group under concurrent consumers; no gaps inside one pop.
2. One live lease per (partition, group): a second consumer of the group gets a 204.
3. An ack of offset N completes every earlier offset (cursor = N, next pop starts at N+1).
4. Mixed outcomes clamp the cursor below the lowest signal; dlq > failed > retry at ties.
5. autoAck is at-most-once: committed at pop, never redelivered.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import httpx

from tests.support import (
    BrokerProcess,
    configure,
    create_database,
    cursor_row,
    dlq_rows,
    expire_leases_of,
    pop_json,
    push_items,
    wait_for,
)

PARTITIONS = 4
PER_PARTITION = 30
CONSUMERS = 10


def acks(messages: list[dict[str, Any]], *statuses: str) -> list[dict[str, Any]]:
    return [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
             "leaseId": m["leaseId"], "status": s} for m, s in zip(messages, statuses)]


async def test_ten_concurrent_consumers_of_a_group_see_each_partition_in_order_without_gaps(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    for p in range(PARTITIONS):
        await push_items(http, queue_name, [{"p": p, "seq": i} for i in range(PER_PARTITION)],
                         partition=f"P{p}", prefix=f"p{p}-")
    delivered: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    pops: list[list[tuple[int, int]]] = []
    done = asyncio.Event()

    async def consumer(client: httpx.AsyncClient) -> None:
        while not done.is_set():
            body = await pop_json(client, queue_name, batch=4, consumerGroup="ordered")
            if body is None:
                await asyncio.sleep(0.01)
                continue
            seen = [(m["data"]["p"], m["data"]["seq"]) for m in body["messages"]]
            pops.append(seen)
            for p, seq in seen:
                delivered[p].append(seq)
            r = await client.post("/api/v1/ack/batch", json={
                "consumerGroup": "ordered",
                "acknowledgments": acks(body["messages"], *["completed"] * len(seen))})
            assert all(e["success"] for e in r.json()), r.text
            if sum(len(v) for v in delivered.values()) >= PARTITIONS * PER_PARTITION:
                done.set()

    clients = [httpx.AsyncClient(base_url=str(http.base_url), timeout=30)
               for _ in range(CONSUMERS)]
    try:
        await asyncio.wait_for(asyncio.gather(*(consumer(c) for c in clients)), 60)
    finally:
        for c in clients:
            await c.aclose()
    for seen in pops:  # one partition per pop (partitions=1), consecutive offsets
        assert len({p for p, _ in seen}) == 1
        seqs = [s for _, s in seen]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    for p in range(PARTITIONS):  # every message exactly once, in order, per partition
        assert delivered[p] == list(range(PER_PARTITION))
        row = await cursor_row(db, queue_name, "ordered", f"P{p}")
        assert row is not None and row["committed"] == PER_PARTITION - 1
    assert len(pops) >= PARTITIONS * PER_PARTITION // 4


async def test_second_consumer_of_the_group_gets_204_from_a_leased_partition(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["a", "b", "c"])
    first = await pop_json(http, queue_name, consumerGroup="g")
    assert first is not None and [m["data"] for m in first["messages"]] == ["a"]
    # Messages b and c are past the leased span, but the partition is leased to the group.
    assert await pop_json(http, queue_name, consumerGroup="g", batch=10) is None
    async with httpx.AsyncClient(base_url=str(http.base_url)) as other:  # any worker
        for _ in range(4):
            assert await pop_json(other, queue_name, consumerGroup="g", batch=10) is None
    other_group = await pop_json(http, queue_name, consumerGroup="h", batch=10)
    assert other_group is not None and len(other_group["messages"]) == 3
    # Concurrent claims of one fresh (partition, group): exactly one wins the span.
    answers = await asyncio.gather(*(pop_json(http, queue_name, consumerGroup="race", batch=10)
                                     for _ in range(8)))
    winners = [a for a in answers if a is not None]
    assert len(winners) == 1 and len(winners[0]["messages"]) == 3
    # Once acked, the group may pop again at once.
    r = await http.post("/api/v1/ack", json={**acks(first["messages"], "completed")[0],
                                             "consumerGroup": "g"})
    assert r.json()[0]["success"] is True
    nxt = await pop_json(http, queue_name, consumerGroup="g", batch=10)
    assert nxt is not None and [m["data"] for m in nxt["messages"]] == ["b", "c"]


async def test_ack_of_offset_3_completes_0_to_2_and_the_next_pop_starts_at_4(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, [f"m{i}" for i in range(6)])
    body = await pop_json(http, queue_name, batch=6)
    assert body is not None
    r = await http.post("/api/v1/ack", json=acks([body["messages"][3]], "completed")[0])
    item = r.json()[0]
    assert (item["success"], item["leaseReleased"]) == (True, False)  # partial: lease kept
    row = await cursor_row(db, queue_name)
    assert row is not None
    assert (row["committed"], row["batch_end"], row["worker_id"]) == (3, 5, body["leaseId"])
    await expire_leases_of(db, queue_name)  # the holder vanishes; the rest is redelivered
    again = await pop_json(http, queue_name, batch=10)
    assert again is not None
    assert [m["transactionId"] for m in again["messages"]] == ["t4", "t5"]
    r = await http.post("/api/v1/ack", json=acks([again["messages"][1]], "completed")[0])
    assert r.json()[0]["leaseReleased"] is True
    assert (await cursor_row(db, queue_name))["committed"] == 5  # type: ignore[index]


async def test_mixed_outcomes_clamp_the_cursor_below_the_first_failure(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, retryDelay=0)  # redelivery at once
    await push_items(http, queue_name, ["m0", "m1", "m2", "m3"])
    body = await pop_json(http, queue_name, batch=4)
    assert body is not None
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": acks(
        body["messages"], "completed", "completed", "failed", "completed")})
    assert [e["success"] for e in r.json()] == [True] * 4
    assert all(e["leaseReleased"] for e in r.json())
    row = await cursor_row(db, queue_name)
    assert row is not None
    assert (row["committed"], row["retry_count"], row["worker_id"]) == (1, 1, None)
    again = await pop_json(http, queue_name, batch=10)  # immediately, no lease to wait for
    assert again is not None
    assert [m["data"] for m in again["messages"]] == ["m2", "m3"]


async def test_at_equal_offsets_failed_beats_retry_and_dlq_beats_failed(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, retryLimit=5, retryDelay=0)
    await push_items(http, queue_name, ["m0", "m1", "m2"])
    body = await pop_json(http, queue_name, batch=3)
    assert body is not None
    m0, m1, _ = body["messages"]
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [
        *acks([m1], "retry"), *acks([m1], "failed"), *acks([m0], "completed")]})
    assert [e["success"] for e in r.json()] == [True] * 3
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["retry_count"]) == (0, 1)  # failed won
    body = await pop_json(http, queue_name, batch=3)
    assert body is not None and body["messages"][0]["data"] == "m1"
    m1 = body["messages"][0]
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [
        *acks([m1], "failed"), *acks([m1], "dlq"), *acks([m1], "retry")]})
    assert [e["dlq"] for e in r.json()] == [False, True, False]
    [dead] = await dlq_rows(db, queue_name)
    assert dead["transaction_id"] == "t1"
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["retry_count"]) == (1, 0)
    body = await pop_json(http, queue_name, batch=3)
    assert body is not None and [m["data"] for m in body["messages"]] == ["m2"]


async def test_lowest_signal_wins_and_completed_positions_above_it_are_redelivered(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, retryDelay=0)  # redelivery at once
    await push_items(http, queue_name, ["m0", "m1", "m2", "m3"])
    body = await pop_json(http, queue_name, batch=4)
    assert body is not None
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": acks(
        body["messages"], "completed", "retry", "completed", "dlq")})
    assert [e["dlq"] for e in r.json()] == [False] * 4
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["retry_count"]) == (0, 0)
    assert await dlq_rows(db, queue_name) == []  # m3's dlq is above the clamp: not applied
    again = await pop_json(http, queue_name, batch=4)
    assert again is not None
    assert [m["data"] for m in again["messages"]] == ["m1", "m2", "m3"]


async def test_auto_ack_commits_at_pop_and_never_redelivers(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, retryDelay=0)  # redelivery at once
    await push_items(http, queue_name, [f"m{i}" for i in range(5)])
    body = await pop_json(http, queue_name, batch=3, autoAck=True, consumerGroup="amo")
    assert body is not None
    assert body["leaseId"] == ""
    assert {m["leaseId"] for m in body["messages"]} == {""}
    assert [m["data"] for m in body["messages"]] == ["m0", "m1", "m2"]
    row = await cursor_row(db, queue_name, "amo")
    assert row is not None
    assert (row["committed"], row["worker_id"], row["batch_end"]) == (2, None, None)
    # The consumer "crashes" before processing: nothing comes back, even after expiry.
    await expire_leases_of(db, queue_name)
    body = await pop_json(http, queue_name, batch=10, consumerGroup="amo")
    assert body is not None
    assert [m["data"] for m in body["messages"]] == ["m3", "m4"]  # a leased pop, after m2
    r = await http.post("/api/v1/ack/batch", json={"consumerGroup": "amo",
                                                   "acknowledgments": acks(
        body["messages"], "failed", "failed")})
    assert all(e["success"] for e in r.json())
    body = await pop_json(http, queue_name, batch=10, autoAck=True, consumerGroup="amo")
    assert body is not None and [m["data"] for m in body["messages"]] == ["m3", "m4"]
    assert await pop_json(http, queue_name, batch=10, autoAck=True, consumerGroup="amo") is None
    assert (await cursor_row(db, queue_name, "amo"))["committed"] == 4  # type: ignore[index]


async def test_consumer_dying_mid_batch_is_redelivered_after_lease_expiry_by_the_reaper(
        pg_server_url: str, queue_name: str) -> None:
    """A separate broker with the reaper as its own process: the consumer pops a batch with
    a 1 s lease and never acks. The reaper (every 200 ms) clears the lease and NOTIFYs, which
    wakes a long poll parked by a second consumer of the same group: it receives the whole
    batch again, and lease expiry has not charged the retry budget."""
    url = await create_database(pg_server_url)
    with BrokerProcess(url, workers=2, reaper=True, env={"REAPER_INTERVAL_MS": "200"}) as proc:
        conn = await asyncpg.connect(url)
        try:
            async with httpx.AsyncClient(base_url=proc.url, timeout=30) as client:
                await configure(client, queue_name, leaseTime=1)
                await push_items(client, queue_name, ["a", "b", "c"])
                dead = await pop_json(client, queue_name, batch=3, consumerGroup="g")
                assert dead is not None and len(dead["messages"]) == 3
                # Consumer 2 parks while the span is still leased to the dead consumer.
                parked = asyncio.create_task(client.get(
                    f"/api/v1/pop/queue/{queue_name}",
                    params={"batch": 3, "consumerGroup": "g", "wait": "true",
                            "timeout": 8000}))

                async def released() -> bool:
                    row = await cursor_row(conn, queue_name, "g")
                    return row is not None and row["worker_id"] != dead["leaseId"]

                await wait_for(released, timeout=8)
                r = await asyncio.wait_for(parked, 10)
                assert r.status_code == 200
                again = r.json()
                assert [m["transactionId"] for m in again["messages"]] == ["t0", "t1", "t2"]
                assert again["leaseId"] != dead["leaseId"]
                row = await cursor_row(conn, queue_name, "g")
                assert row is not None
                assert (row["committed"], row["retry_count"]) == (-1, 0)
                # The dead consumer's late ack is refused; the live one's is taken.
                r = await client.post("/api/v1/ack/batch", json={
                    "consumerGroup": "g", "acknowledgments": acks(dead["messages"],
                                                                  *["completed"] * 3)})
                assert [e["success"] for e in r.json()] == [False] * 3
                r = await client.post("/api/v1/ack/batch", json={
                    "consumerGroup": "g", "acknowledgments": acks(again["messages"],
                                                                  *["completed"] * 3)})
                assert [e["success"] for e in r.json()] == [True] * 3
                assert (await cursor_row(conn, queue_name, "g"))["committed"] == 2  # type: ignore[index]
        finally:
            await conn.close()


async def test_reaper_clears_an_expired_lease_without_any_pop(
        pg_server_url: str, queue_name: str) -> None:
    """Proves the reaper process itself expires leases (a pop would also take over an expired
    lease, so here nobody pops)."""
    url = await create_database(pg_server_url)
    with BrokerProcess(url, workers=1, reaper=True, env={"REAPER_INTERVAL_MS": "200"}) as proc:
        conn = await asyncpg.connect(url)
        try:
            async with httpx.AsyncClient(base_url=proc.url, timeout=30) as client:
                await push_items(client, queue_name, ["a"])
                body = await pop_json(client, queue_name, consumerGroup="g")
                assert body is not None
                await expire_leases_of(conn, queue_name)

                async def cleared() -> bool:
                    row = await cursor_row(conn, queue_name, "g")
                    return row is not None and row["worker_id"] is None

                await wait_for(cleared, timeout=5)
                row = await cursor_row(conn, queue_name, "g")
                assert row is not None
                assert (row["committed"], row["batch_end"], row["retry_count"]) == (-1, None, 0)
        finally:
            await conn.close()
