"""Property: a non-waiting pop answers 204 only when nothing is deliverable to it.

Hypothesis draws a walk of pushes to a few partitions, marks (instants between pushes),
pops by new and old groups (subscription all / new / from a mark, one partition or any,
`partitions` 1-3, leased or autoAck), acks, and back-dating of a partition's messages on a
queue with delayedProcessing. Before every pop, the messages deliverable to its group are
read directly from the log and the cursors with the rules of wire-protocol §4.2 (not with
the broker's claim): a cursor delivers what lies past its committed offset when no live
lease or retry delay holds it; a partition without a cursor delivers what its group's
subscription (stored on the group's first wildcard pop, else the request's) starts at.
A 204 while that read shows something deliverable fails the test.

One pop at a time, leases far longer than an example: the state the read sees is the state
the pop claims from.

The broker runs two worker processes, and each learns of the other's commits by
notification (core/engine/ready); a state change is answered only once it is announced, and
a pop hears every announcement made before it arrived before it answers 204. So a 204 while
the read shows something deliverable fails at once, with no allowance for the wake-up
latency. Back-dating messages in SQL (Age) is announced as a test must (a wake-up naming no
partition, committed before the next pop).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import BrokerProcess

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all

PARTITIONS = [f"p{i}" for i in range(5)]
GROUPS = ["__QUEUE_MODE__", "a", "b", "c", "d", "e"]
DELAY_SECONDS = 3600


@dataclass(frozen=True)
class Push:
    partition: str
    count: int


@dataclass(frozen=True)
class Mark:
    pass


@dataclass(frozen=True)
class Age:
    partition: str  # its messages become older than delayedProcessing


@dataclass(frozen=True)
class Pop:
    group: str
    seed: str  # all | new | mark:<n>
    partition: str | None
    partitions: int
    batch: int
    auto_ack: bool
    ack: bool  # ack what it got (completed) at once


STEPS = st.one_of(
    st.builds(Push, st.sampled_from(PARTITIONS), st.integers(1, 3)),
    st.just(Mark()),
    st.builds(Age, st.sampled_from(PARTITIONS)),
    st.builds(Pop, st.sampled_from(GROUPS),
              st.sampled_from(["all", "new", "mark:0", "mark:1", "mark:2"]),
              st.one_of(st.none(), st.none(), st.sampled_from(PARTITIONS)),
              st.integers(1, 3), st.integers(1, 5), st.booleans(), st.booleans()))


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def _deliverable(db: asyncpg.Connection, queue: str, group: str, seed: str,
                       since: datetime | None, partition: str | None,
                       delay: int) -> list[str]:
    """Partitions holding a message deliverable to `group` now, read from the tables."""
    stored = await db.fetchrow(
        "SELECT s.mode, s.subscription_from FROM queen.consumer_subscriptions s"
        "  JOIN queen.queues q ON q.id = s.queue_id"
        " WHERE q.name = $1 AND s.consumer_group = $2", queue, group)
    if group == "__QUEUE_MODE__":
        seed, since = "all", None
    elif stored is not None:  # the group's first wildcard pop chose for every later pop
        seed, since = "timestamp", stored["subscription_from"]
    rows = await db.fetch(
        "SELECT p.name, s.base_offset, s.last_offset, s.created_at,"
        "       s.created_at <= now() - make_interval(secs => $3) AS visible,"
        "       c.committed, c.partition_id IS NOT NULL AS has_cursor,"
        "       (c.worker_id IS NOT NULL AND c.lease_expires_at > now()) AS leased,"
        "       (c.not_before IS NOT NULL AND c.not_before > now()) AS held"
        "  FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id"
        "  JOIN queen.log_segments s ON s.partition_id = p.id"
        "  LEFT JOIN queen.log_consumers c"
        "    ON c.partition_id = p.id AND c.consumer_group = $2"
        " WHERE q.name = $1", queue, group, delay)
    out = set()
    for r in rows:
        if partition is not None and r["name"] != partition or not r["visible"]:
            continue
        if r["has_cursor"]:
            if not r["leased"] and not r["held"] and r["last_offset"] > r["committed"]:
                out.add(r["name"])
        elif seed == "all" or (seed == "timestamp" and since is not None
                               and r["created_at"] >= since):
            out.add(r["name"])
    return sorted(out)


async def _walk(urls: list[str], database_url: str, delayed: bool,
                steps: list[object]) -> None:
    """Each step goes to the next broker in `urls`, in turn."""
    queue = "prop-" + uuid.uuid4().hex[:10]
    delay = DELAY_SECONDS if delayed else 0
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(httpx.AsyncClient(base_url=u, timeout=30))
                   for u in urls]
        turn = itertools.cycle(clients)
        http = clients[0]
        db = await asyncpg.connect(database_url)
        try:
            r = await http.post("/api/v1/configure", json={
                "queue": queue, "options": {"delayedProcessing": delay}})
            assert r.status_code in (200, 201), r.text
            marks: list[datetime] = []
            pushed = 0
            for step in steps:
                http = next(turn)
                if isinstance(step, Push):
                    r = await http.post("/api/v1/push", json={"items": [
                        {"queue": queue, "partition": step.partition, "payload": i,
                         "transactionId": f"t{pushed + i}"} for i in range(step.count)]})
                    assert r.status_code == 201, r.text
                    pushed += step.count
                elif isinstance(step, Mark):
                    marks.append(await db.fetchval("SELECT clock_timestamp()"))
                elif isinstance(step, Age):
                    await db.execute(  # shifted in UTC: Citus pushes only immutable
                        "UPDATE queen.log_segments s"  # arithmetic on a column down
                        "   SET created_at = ((s.created_at AT TIME ZONE 'UTC')"
                        "                     - make_interval(secs => $3 + 60)) AT TIME ZONE 'UTC'"
                        "  FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id"
                        " WHERE s.partition_id = p.id AND q.name = $1 AND p.name = $2",
                        queue, step.partition, delay)
                    await db.execute("SELECT pg_notify('queen_wakeup', id::text) "
                                     "FROM queen.queues WHERE name = $1", queue)
                elif isinstance(step, Pop):
                    await _pop(http, db, queue, step, marks, delay)
        finally:
            await db.close()


async def _pop(http: httpx.AsyncClient, db: asyncpg.Connection, queue: str, step: Pop,
               marks: list[datetime], delay: int) -> None:
    params: dict[str, str] = {"wait": "false", "batch": str(step.batch),
                              "partitions": str(step.partitions),
                              "autoAck": str(step.auto_ack).lower()}
    if step.group != "__QUEUE_MODE__":
        params["consumerGroup"] = step.group
    seed, since = step.seed, None
    if seed.startswith("mark:"):
        n = int(seed.split(":")[1])
        if n >= len(marks):
            seed = "all"
        else:
            seed, since = "timestamp", marks[n]
            params["subscriptionFrom"] = _iso(since)
    if seed == "new":
        params["subscriptionMode"] = "new"
    path = f"/api/v1/pop/queue/{queue}"
    if step.partition is not None:
        path += f"/partition/{step.partition}"
    expected = await _deliverable(db, queue, step.group, seed, since, step.partition, delay)
    r = await http.get(path, params=params)
    assert r.status_code in (200, 204), r.text
    assert r.status_code == 200 or not expected, (
        f"204 for {step} while {expected} held messages deliverable to it")
    if r.status_code == 204:
        return
    body = r.json()
    assert 0 < len(body["messages"]) <= step.batch
    if step.ack and not step.auto_ack:
        r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [
            {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
             "leaseId": body["leaseId"], "consumerGroup": step.group, "status": "completed"}
            for m in body["messages"]]})
        assert r.status_code == 200, r.text


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(delayed=st.booleans(), steps=st.lists(STEPS, min_size=4, max_size=16))
def test_a_non_waiting_pop_answers_204_only_when_nothing_is_deliverable(
        broker: BrokerProcess, database_url: str, delayed: bool, steps: list[object]) -> None:
    asyncio.run(_walk([broker.url], database_url, delayed, steps))


@pytest.fixture(scope="module")
def other_broker(database_url: str) -> Iterator[BrokerProcess]:
    """A second broker host over the same database (one worker)."""
    with BrokerProcess(database_url, workers=1) as proc:
        yield proc


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(delayed=st.booleans(), steps=st.lists(STEPS, min_size=4, max_size=16))
def test_the_same_holds_across_two_brokers_taking_turns(
        broker: BrokerProcess, other_broker: BrokerProcess, database_url: str,
        delayed: bool, steps: list[object]) -> None:
    """Every step goes to the other broker than the one before: a push on one, the pop on
    the other, which hears of it only by notification."""
    asyncio.run(_walk([broker.url, other_broker.url], database_url, delayed, steps))
