"""Pop routes (§4.2–4.4) over real HTTP: answer shape, budget across partitions, visibility
options, subscription seeding, discovery, and bad query parameters.

Time-dependent options (delayedProcessing, windowBuffer, subscriptionFrom) are driven by
back-dating rows in SQL, never by sleeping.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest

from tests.support import announce_changed, configure, cursor_row, pop_json, push_items

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all

MESSAGE_KEYS = ["id", "transactionId", "traceId", "data", "producerSub", "createdAt",
                "partitionId", "partition", "leaseId", "consumerGroup"]


async def test_pop_answers_the_documented_shape_and_leases_the_span(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, [{"n": 0}, [1, 2], None])
    body = await pop_json(http, queue_name, batch=10)
    assert body is not None
    assert body["success"] is True
    assert body["queue"] == queue_name
    assert body["partition"] == "Default"
    assert body["consumerGroup"] == "__QUEUE_MODE__"
    assert body["partitionsClaimed"] == 1
    assert "autopilot" not in body
    lease = body["leaseId"]
    uuid.UUID(lease)
    messages = body["messages"]
    assert [list(m) for m in messages] == [MESSAGE_KEYS] * 3
    assert [m["data"] for m in messages] == [{"n": 0}, [1, 2], None]
    assert [m["transactionId"] for m in messages] == ["t0", "t1", "t2"]
    assert {m["leaseId"] for m in messages} == {lease}
    assert {m["partitionId"] for m in messages} == {body["partitionId"]}
    assert all(m["createdAt"].endswith("Z") for m in messages)
    row = await cursor_row(db, queue_name)
    assert row is not None
    assert (row["committed"], row["batch_end"], row["worker_id"]) == (-1, 2, lease)
    assert row["lease_live"] is True


async def test_unknown_queue_and_drained_queue_answer_204_without_body(
        http: httpx.AsyncClient, queue_name: str) -> None:
    assert await pop_json(http, "no-such-queue-" + queue_name) is None
    await push_items(http, queue_name, ["x"])
    assert await pop_json(http, queue_name, autoAck=True) is not None
    assert await pop_json(http, queue_name) is None


async def test_absent_batch_is_one_and_autopilot_chooses_100_and_echoes_it(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await push_items(http, queue_name, list(range(150)))
    body = await pop_json(http, queue_name, autoAck=True)
    assert body is not None and len(body["messages"]) == 1
    body = await pop_json(http, queue_name, autopilot=True, autoAck=True)
    assert body is not None
    assert len(body["messages"]) == 100
    assert body["autopilot"]["batch"] == 100
    assert body["autopilot"]["partitions"] == 1
    assert isinstance(body["autopilot"]["waitMs"], int)
    assert [m["data"] for m in body["messages"]] == list(range(1, 101))


async def test_batch_budget_spans_three_partitions_under_one_lease_id(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    for p in ("A", "B", "C"):
        await push_items(http, queue_name, [f"{p}{i}" for i in range(2)], partition=p,
                         prefix=p)
    body = await pop_json(http, queue_name, batch=5, partitions=3, consumerGroup="g")
    assert body is not None
    assert body["partitionsClaimed"] == 3
    data = [m["data"] for m in body["messages"]]
    assert len(data) == 5
    # Claim order across partitions, offset order within each; the budget ran out in the last.
    by_part: dict[str, list[str]] = {}
    for m in body["messages"]:
        by_part.setdefault(m["partition"], []).append(m["data"])
    assert sorted(len(v) for v in by_part.values()) == [1, 2, 2]
    for name, values in by_part.items():
        assert values == [f"{name}{i}" for i in range(len(values))]
    assert body["partition"] == body["messages"][0]["partition"]
    lease = body["leaseId"]
    assert {m["leaseId"] for m in body["messages"]} == {lease}
    for name, values in by_part.items():
        row = await cursor_row(db, queue_name, "g", name)
        assert row is not None
        assert (row["worker_id"], row["batch_end"], row["committed"]) == (
            lease, len(values) - 1, -1)
    # One batch ack with the shared lease releases all three partitions.
    r = await http.post("/api/v1/ack/batch", json={"consumerGroup": "g", "acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "status": "completed", "leaseId": lease} for m in body["messages"]]})
    assert r.status_code == 200
    assert [e["success"] for e in r.json()] == [True] * 5
    for name, values in by_part.items():
        row = await cursor_row(db, queue_name, "g", name)
        assert row is not None
        assert (row["worker_id"], row["committed"]) == (None, len(values) - 1)


async def test_partition_route_pops_only_that_partition(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await push_items(http, queue_name, ["a0", "a1"], partition="A")
    await push_items(http, queue_name, ["b0"], partition="B", prefix="b")
    r = await http.get(f"/api/v1/pop/queue/{queue_name}/partition/B",
                       params={"batch": 10, "partitions": 5})
    assert r.status_code == 200
    assert [m["data"] for m in r.json()["messages"]] == ["b0"]
    assert r.json()["partitionsClaimed"] == 1
    r = await http.get(f"/api/v1/pop/queue/{queue_name}/partition/Nope")
    assert r.status_code == 204


async def test_lease_seconds_overrides_the_queue_lease_time(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, leaseTime=600)
    await push_items(http, queue_name, ["x", "y"])
    assert await pop_json(http, queue_name, leaseSeconds=7, consumerGroup="short") is not None
    assert await pop_json(http, queue_name, consumerGroup="long") is not None
    left = await db.fetch(
        """SELECT c.consumer_group, extract(epoch FROM c.lease_expires_at - now()) AS left
             FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
             JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1""", queue_name)
    seconds = {r["consumer_group"]: float(r["left"]) for r in left}
    assert 5 < seconds["short"] <= 7
    assert 590 < seconds["long"] <= 600


async def test_the_lease_defaults_to_the_queue_s_300_s_and_to_60_s_when_lease_time_is_0(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    """wire-protocol §4.9: leaseTime defaults to 300; §4.2: a queue whose leaseTime is 0
    leases for 60 s."""
    await push_items(http, queue_name, ["x"])  # created by the push: default options
    await push_items(http, queue_name + "-zero", ["y"])
    await configure(http, queue_name + "-zero", leaseTime=0)
    assert await pop_json(http, queue_name) is not None
    assert await pop_json(http, queue_name + "-zero") is not None
    left = await db.fetch(
        """SELECT q.name, extract(epoch FROM c.lease_expires_at - now()) AS left
             FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
             JOIN queen.queues q ON q.id = p.queue_id WHERE q.name LIKE $1 || '%'""",
        queue_name)
    seconds = {r["name"]: float(r["left"]) for r in left}
    assert 290 < seconds[queue_name] <= 300
    assert 50 < seconds[queue_name + "-zero"] <= 60


async def test_delayed_processing_hides_messages_younger_than_the_delay(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, delayedProcessing=60)
    await push_items(http, queue_name, ["old"], prefix="o")
    await push_items(http, queue_name, ["young"], prefix="y")
    assert await pop_json(http, queue_name, batch=10) is None
    # Age only the first segment: the young message stays hidden, and nothing behind it leaks.
    await db.execute(
        # (Shifted in UTC: Citus pushes only immutable arithmetic on a column down.)
        """UPDATE queen.log_segments s
              SET created_at = ((s.created_at AT TIME ZONE 'UTC') - interval '61 seconds')
                               AT TIME ZONE 'UTC'
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
            WHERE s.partition_id = p.id AND q.name = $1 AND s.base_offset = 0""", queue_name)
    await announce_changed(db, queue_name)  # the brokers expect it due in a minute
    body = await pop_json(http, queue_name, batch=10)
    assert body is not None
    assert [m["data"] for m in body["messages"]] == ["old"]
    row = await cursor_row(db, queue_name)
    assert row is not None and row["batch_end"] == 0


async def test_window_buffer_holds_the_partition_until_it_has_been_quiet(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, windowBuffer=30)
    await push_items(http, queue_name, ["a", "b"])
    await push_items(http, queue_name, ["other"], partition="Quiet", prefix="q")
    set_quiet = """UPDATE queen.log_partitions p SET last_write_at = now() - interval '31 s'
                     FROM queen.queues q WHERE q.id = p.queue_id AND q.name = $1
                      AND p.name = $2"""
    await db.execute(set_quiet, queue_name, "Quiet")
    body = await pop_json(http, queue_name, batch=10, partitions=5)
    assert body is not None
    assert [m["data"] for m in body["messages"]] == ["other"]
    await db.execute(set_quiet, queue_name, "Default")
    await announce_changed(db, queue_name)
    body = await pop_json(http, queue_name, batch=10, consumerGroup="g2", partitions=5)
    assert body is not None
    assert sorted(m["data"] for m in body["messages"]) == ["a", "b", "other"]


async def test_subscription_new_skips_the_backlog_and_all_reads_it(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await push_items(http, queue_name, ["old0", "old1"])
    assert await pop_json(http, queue_name, consumerGroup="fresh",
                          subscriptionMode="new") is None
    await push_items(http, queue_name, ["new0"], prefix="n")
    body = await pop_json(http, queue_name, consumerGroup="fresh", subscriptionMode="new",
                          batch=10)
    assert body is not None and [m["data"] for m in body["messages"]] == ["new0"]
    body = await pop_json(http, queue_name, consumerGroup="everything",
                          subscriptionMode="all", batch=10)
    assert body is not None
    assert [m["data"] for m in body["messages"]] == ["old0", "old1", "new0"]
    # Unrecognised modes mean all; __QUEUE_MODE__ always starts at the oldest.
    body = await pop_json(http, queue_name, consumerGroup="odd",
                          subscriptionMode="from_beginning", batch=10)
    assert body is not None and len(body["messages"]) == 3
    body = await pop_json(http, queue_name, subscriptionMode="new", batch=10)
    assert body is not None and len(body["messages"]) == 3


async def test_subscription_from_iso_timestamp_starts_at_the_first_message_at_or_after_it(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    for i in range(3):  # three pushes = three segments, back-dated to 3, 2 and 1 hours ago
        await push_items(http, queue_name, [f"m{i}"], prefix=f"t{i}-")
    base = datetime.now(UTC)
    await db.execute(
        """UPDATE queen.log_segments s
              SET created_at = (($2::timestamptz AT TIME ZONE 'UTC')
                                - make_interval(hours => 3 - s.base_offset::int)) AT TIME ZONE 'UTC'
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
            WHERE s.partition_id = p.id AND q.name = $1""", queue_name, base)
    since = (base - timedelta(hours=2, minutes=30)).isoformat().replace("+00:00", "Z")
    body = await pop_json(http, queue_name, consumerGroup="late", subscriptionFrom=since,
                          batch=10)
    assert body is not None
    assert [m["data"] for m in body["messages"]] == ["m1", "m2"]
    future = (base + timedelta(hours=1)).isoformat()
    assert await pop_json(http, queue_name, consumerGroup="future",
                          subscriptionFrom=future) is None


async def test_discovery_pop_reads_every_queue_of_a_namespace_and_task(
        http: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    ns = "ns" + uuid.uuid4().hex[:10]
    await push_items(http, f"{ns}.jobs.a", ["a"], prefix="a")
    await push_items(http, f"{ns}.jobs.b", ["b"], prefix="b")
    await push_items(http, f"{ns}.other.c", ["c"], prefix="c")
    r = await http.get("/api/v1/pop", params={"namespace": ns, "task": "jobs", "batch": 10,
                                              "partitions": 10, "consumerGroup": "d"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["queue"] == ""
    assert sorted(m["data"] for m in body["messages"]) == ["a", "b"]
    assert body["partitionsClaimed"] == 2
    # Each message carries what an ack needs; acking both releases both partitions.
    r2 = await http.post("/api/v1/ack/batch", json={"consumerGroup": "d", "acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "leaseId": m["leaseId"]} for m in body["messages"]]})
    assert [e["success"] for e in r2.json()] == [True, True]
    r = await http.get("/api/v1/pop", params={"task": "other", "consumerGroup": "d"})
    assert [m["data"] for m in r.json()["messages"]] == ["c"]
    assert (await cursor_row(db, f"{ns}.jobs.a", "d")) is not None


async def test_discovery_pop_without_namespace_or_task_answers_400(
        http: httpx.AsyncClient) -> None:
    for params in ({}, {"namespace": "", "task": ""}, {"batch": "5"}):
        r = await http.get("/api/v1/pop", params=params)
        assert r.status_code == 400
        assert r.json() == {"success": False, "error": "namespace or task is required",
                            "messages": []}


@pytest.mark.parametrize(("param", "value", "fragment"), [
    ("batch", "-1", "batch must be between 1 and 10000"),
    ("batch", "0", "batch must be between 1 and 10000"),
    ("batch", "ten", "batch must be an integer"),
    ("batch", "1.5", "batch must be an integer"),
    ("partitions", "-3", "partitions must be between 1 and 1000"),
    ("timeout", "-5", "timeout must be between 0 and 3600000"),
    ("timeout", "soon", "timeout must be an integer"),
    ("leaseSeconds", "-1", "leaseSeconds must be between 0 and 3600"),
    ("leaseSeconds", "x", "leaseSeconds must be an integer"),
    ("wait", "maybe", "wait must be true or false"),
    ("autoAck", "2", "autoAck must be true or false"),
    ("subscriptionFrom", "yesterday", "subscriptionFrom must be an ISO-8601 timestamp"),
])
async def test_bad_pop_parameter_answers_400_naming_it_and_takes_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, param: str,
        value: str, fragment: str) -> None:
    await push_items(http, queue_name, ["x"])
    for path, extra in ((f"/api/v1/pop/queue/{queue_name}", {}),
                        ("/api/v1/pop", {"namespace": queue_name})):
        r = await http.get(path, params={param: value, "consumerGroup": "bad", **extra})
        assert r.status_code == 400, (path, r.text)
        assert r.headers["content-type"].startswith("application/json")
        assert fragment in r.json()["error"]
    assert await cursor_row(db, queue_name, "bad") is None


async def test_a_pop_spanning_several_segments_is_contiguous_and_resumes_mid_segment(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    for k in range(3):  # three pushes: segments [0,1], [2,3], [4,5]
        await push_items(http, queue_name, [f"s{k}a", f"s{k}b"], prefix=f"s{k}-")
    body = await pop_json(http, queue_name, batch=3)
    assert body is not None
    assert [m["data"] for m in body["messages"]] == ["s0a", "s0b", "s1a"]
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "leaseId": m["leaseId"]} for m in body["messages"]]})
    assert all(e["success"] for e in r.json())
    body = await pop_json(http, queue_name, batch=10)
    assert body is not None
    assert [m["data"] for m in body["messages"]] == ["s1b", "s2a", "s2b"]
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["batch_end"]) == (2, 5)
