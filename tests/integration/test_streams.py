"""The official client's stream API (`queen.streams`, queen-mq 2.6) end to end against the
real broker (wire-protocol-extensions §18): a map/filter pipeline, a tumbling window with
event time, a token-bucket gate acking partially, and the 409 of a changed chain.

Every runner is stopped in a `finally`; waits are bounded (BOUND seconds) and poll the sink.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import httpx
import pytest
from queen import Queen
from queen.streams import Stream
from queen.streams.helpers.rate_limiter import token_bucket_gate
from queen.streams.runtime.runner import Runner

from tests.support import BrokerProcess, cursor_row

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all

BOUND = 60.0  # seconds a pipeline may take to produce what a test waits for


@pytest.fixture
async def client(broker: BrokerProcess) -> AsyncIterator[Queen]:
    queen = Queen(broker.url)
    try:
        yield queen
    finally:
        await queen.close()


async def push(http: httpx.AsyncClient, queue: str, items: list[dict[str, Any]]) -> None:
    r = await http.post("/api/v1/push", json={"items": [{"queue": queue, **i} for i in items]})
    assert r.status_code == 201, r.text
    assert {e["status"] for e in r.json()} == {"queued"}


async def drain(http: httpx.AsyncClient, queue: str, group: str = "reader") -> list[Any]:
    """Every message of `queue` not yet read by `group`, acked (autoAck)."""
    out: list[Any] = []
    while True:
        r = await http.get(f"/api/v1/pop/queue/{queue}", params={
            "batch": "1000", "wait": "false", "consumerGroup": group, "autoAck": "true",
            "partitions": "100"})
        assert r.status_code in (200, 204), r.text
        if r.status_code == 204:
            return out
        out.extend(m["data"] for m in r.json()["messages"])


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + BOUND
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not reached within {BOUND} s: {what}")
        await asyncio.sleep(0.2)


async def test_map_filter_pipeline_writes_each_kept_message_once_to_the_sink(
        client: Queen, http: httpx.AsyncClient, broker: BrokerProcess,
        db: asyncpg.Connection, queue_name: str) -> None:
    sink = queue_name + "-sink"
    for p in ("A", "B", "C"):
        await push(http, queue_name, [{"partition": p, "payload": {"n": i, "p": p}}
                                      for i in range(20)])
    stream = (Stream.from_(client.queue(queue_name))
              .filter(lambda m: m["data"]["n"] % 2 == 0)
              .map(lambda m: {"n": m["data"]["n"] * 10, "p": m["data"]["p"]})
              .to(client.queue(sink)))
    runner = await stream.run(query_id=queue_name, url=broker.url, max_wait_millis=200)
    seen: list[Any] = []
    try:
        async def done() -> bool:
            seen.extend(await drain(http, sink))
            return len(seen) >= 30
        await until(done, "30 results in the sink")
        await asyncio.sleep(0.5)
        seen.extend(await drain(http, sink))
    finally:
        await runner.stop()
    assert sorted((s["p"], s["n"]) for s in seen) == sorted(
        (p, i * 10) for p in ("A", "B", "C") for i in range(0, 20, 2))
    # Every source partition acked to its end under the query's group.
    for p in ("A", "B", "C"):
        row = await cursor_row(db, queue_name, f"streams.{queue_name}", p)
        assert row is not None and row["committed"] == 19 and row["worker_id"] is None
    # The sink's messages sit in the source partition's namesake (the sink's default).
    parts = await db.fetch("SELECT p.name FROM queen.log_partitions p JOIN queen.queues q "
                           "ON q.id = p.queue_id WHERE q.name = $1 ORDER BY 1", sink)
    assert [r["name"] for r in parts] == ["A", "B", "C"]


def window_stream(client: Queen, source: str, sink: str) -> Stream:
    """Sum of `v` per key `k` in 10 s tumbling windows of event time `ts` (ms)."""
    return (Stream.from_(client.queue(source))
            .key_by(lambda m: m["data"]["k"])
            .window_tumbling(seconds=10, event_time=lambda m: m["data"]["ts"],
                             idle_flush_ms=200)
            .reduce(lambda acc, value: acc + value["v"], 0)
            .map(lambda acc, ctx: {"key": ctx["key"], "windowStart": ctx["windowStart"],
                                   "sum": acc})
            .to(client.queue(sink)))


def window_events(partition: str, n: int) -> list[dict[str, Any]]:
    """n events, one per second of event time, keys a/b alternating, v = i; then one event
    at 1000 s that closes every earlier window."""
    events = [{"partition": partition, "payload": {"k": "ab"[i % 2], "ts": i * 1000, "v": i}}
              for i in range(n)]
    events.append({"partition": partition, "payload": {"k": "z", "ts": 1_000_000, "v": 0}})
    return events


def expected_windows(n: int) -> dict[tuple[str, int], int]:
    sums: dict[tuple[str, int], int] = {}
    for i in range(n):
        key = ("ab"[i % 2], (i * 1000 // 10_000) * 10_000)
        sums[key] = sums.get(key, 0) + i
    return sums


async def test_tumbling_window_sum_per_key_with_event_time(
        client: Queen, http: httpx.AsyncClient, broker: BrokerProcess, queue_name: str) -> None:
    sink = queue_name + "-sink"
    await push(http, queue_name, window_events("P", 45))
    runner = await window_stream(client, queue_name, sink).run(
        query_id=queue_name, url=broker.url, max_wait_millis=200, batch_size=7)
    expected = expected_windows(45)
    seen: list[Any] = []
    try:
        async def done() -> bool:
            seen.extend(await drain(http, sink))
            return len(seen) >= len(expected)
        await until(done, "every window's result")
        await asyncio.sleep(1.0)  # an idle flush would emit a duplicate now
        seen.extend(await drain(http, sink))
    finally:
        await runner.stop()
    got = [((s["key"], s["windowStart"]), s["sum"]) for s in seen]
    assert sorted(got) == sorted(expected.items())


async def test_token_bucket_gate_acks_partially_and_keeps_the_lease(
        client: Queen, http: httpx.AsyncClient, broker: BrokerProcess,
        db: asyncpg.Connection, queue_name: str) -> None:
    sink = queue_name + "-sink"
    await push(http, queue_name, [{"payload": {"n": i}} for i in range(10)])
    stream = (Stream.from_(client.queue(queue_name))
              .gate(token_bucket_gate(capacity=4, refill_per_sec=0.001))
              .to(client.queue(sink)))
    runner = await stream.run(query_id=queue_name, url=broker.url, max_wait_millis=200)
    seen: list[Any] = []
    try:
        async def four() -> bool:
            seen.extend(await drain(http, sink))
            return len(seen) >= 4
        await until(four, "the bucket's 4 tokens spent")
        row = await cursor_row(db, queue_name, f"streams.{queue_name}")
        assert row is not None
        # 4 of the 10 leased messages committed; the lease and its batch are kept.
        assert row["committed"] == 3 and row["batch_end"] == 9
        assert row["worker_id"] is not None
        await asyncio.sleep(1.0)
        seen.extend(await drain(http, sink))
    finally:
        await runner.stop()
    assert [s["n"] for s in seen] == [0, 1, 2, 3]
    state = await db.fetch(
        "SELECT s.value FROM queen.stream_state s JOIN queen.stream_queries q "
        "ON q.id = s.query_id WHERE q.name = $1", queue_name)
    assert len(state) == 1 and '"allowedTotal": 4' in state[0]["value"]


async def test_changed_chain_answers_409_and_reset_recovers(
        client: Queen, http: httpx.AsyncClient, broker: BrokerProcess,
        db: asyncpg.Connection, queue_name: str) -> None:
    sink = queue_name + "-sink"
    await push(http, queue_name, window_events("P", 5)[:5])
    first = await window_stream(client, queue_name, sink).run(
        query_id=queue_name, url=broker.url, max_wait_millis=200)
    try:
        async def has_state() -> bool:
            return bool(await db.fetchval(
                "SELECT count(*) FROM queen.stream_state s JOIN queen.stream_queries q "
                "ON q.id = s.query_id WHERE q.name = $1", queue_name))
        await until(has_state, "window state stored")
    finally:
        await first.stop()
    changed = (Stream.from_(client.queue(queue_name))
               .map(lambda m: m["data"]).to(client.queue(sink)))
    # Stream.run's own runner, built by hand so that its HTTP client can be closed after
    # the refusal (run() leaves it open when start() raises).
    refused_runner = Runner(queryId=queue_name, url=broker.url, stream=changed._compile())
    with pytest.raises(Exception) as refused:
        await refused_runner.start()
    await refused_runner.http.close()
    assert "config_hash mismatch: operator chain changed for queryId" in str(refused.value)
    assert await has_state()  # the refusal changed nothing
    second = await changed.run(query_id=queue_name, url=broker.url, reset=True)
    await second.stop()
    assert not await has_state()
