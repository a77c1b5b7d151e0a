"""`POST /streams/v1/cycle` by hand (wire-protocol-extensions §18.3): the lease check (stale,
foreign, expired), a cycle resent after its answer was lost (acked, partial, idle flush),
two runners racing on one partition, the runner's pop shape (§18 "Runner"), and hostile
input. "Nothing changed" is checked on the cursor, the state rows and the sink."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support import BrokerProcess, cursor_row, expire_leases_of, push_items

GROUP_OF = "streams.{}"


async def register(http: httpx.AsyncClient, name: str, sink: str | None = None,
                   config_hash: str = "h1", **extra: Any) -> str:
    r = await http.post("/streams/v1/queries", json={
        "name": name, "source_queue": name, "sink_queue": sink, "config_hash": config_hash,
        **extra})
    assert r.status_code == 200, r.text
    return str(r.json()["query_id"])


async def runner_pop(http: httpx.AsyncClient, queue: str, **params: str) -> dict[str, Any]:
    """The stream runner's pop (§18): batch 200, waiting, 4 partitions, its group."""
    r = await http.get(f"/api/v1/pop/queue/{queue}", params={
        "batch": "200", "wait": "true", "timeout": "1000",
        "consumerGroup": GROUP_OF.format(queue), "partitions": "4", **params})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def cycle(http: httpx.AsyncClient, query_id: str, partition_id: str, *,
                ack: dict[str, Any] | None, group: str, state_ops: list[Any] | None = None,
                push: list[Any] | None = None, release: bool = True) -> httpx.Response:
    return await http.post("/streams/v1/cycle", json={
        "query_id": query_id, "partition_id": partition_id, "consumer_group": group,
        "state_ops": state_ops or [], "push_items": push or [], "ack": ack,
        "release_lease": release})


async def state_of(db: asyncpg.Connection, query_id: str) -> dict[str, str]:
    rows = await db.fetch("SELECT key, value::text FROM queen.stream_state WHERE query_id = "
                          "$1::uuid ORDER BY key", query_id)
    return {r["key"]: r["value"] for r in rows}


async def sink_count(db: asyncpg.Connection, sink: str) -> int:
    return int(await db.fetchval(
        "SELECT coalesce(sum(p.last_offset - p.log_start + 1), 0) FROM queen.log_partitions p "
        "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1", sink))


async def test_runner_pop_shares_one_lease_across_partitions_and_carries_every_field(
        http: httpx.AsyncClient, queue_name: str) -> None:
    for p in ("A", "B", "C", "D", "E"):
        await push_items(http, queue_name, [f"{p}{i}" for i in range(3)], partition=p)
    body = await runner_pop(http, queue_name)
    messages = body["messages"]
    assert len(messages) == 12 and len({m["partitionId"] for m in messages}) == 4
    assert {m["leaseId"] for m in messages} == {body["leaseId"]}
    for m in messages:
        assert m["partition"] in "ABCDE" and m["partitionId"].isdigit()
        assert m["transactionId"] and m["consumerGroup"] == GROUP_OF.format(queue_name)


async def _setup(http: httpx.AsyncClient, queue: str, n: int = 5) -> tuple[str, dict[str, Any]]:
    qid = await register(http, queue, sink=queue + "-sink")
    await push_items(http, queue, [{"i": i} for i in range(n)])
    body = await runner_pop(http, queue)
    return qid, body


def _ack(body: dict[str, Any], lease: str | None = None, count: int | None = None,
         status: str = "completed", upto: int | None = None) -> dict[str, Any]:
    messages = body["messages"][:upto] if upto else body["messages"]
    return {"transactionId": messages[-1]["transactionId"],
            "leaseId": lease or body["leaseId"], "status": status,
            "count": len(messages) if count is None else count}


@pytest.mark.parametrize("which", ["stale", "foreign", "expired"])
async def test_a_cycle_under_a_lease_it_does_not_hold_changes_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, which: str) -> None:
    qid, body = await _setup(http, queue_name)
    pid, group = body["messages"][0]["partitionId"], GROUP_OF.format(queue_name)
    lease = body["leaseId"]
    if which == "stale":  # the lease ran out and another pop holds the batch now
        await expire_leases_of(db, queue_name)
        again = await runner_pop(http, queue_name)
        assert again["leaseId"] != lease
    elif which == "foreign":
        lease = "00000000-0000-7000-8000-000000000000"
    else:
        await expire_leases_of(db, queue_name)
    before = await cursor_row(db, queue_name, group)
    r = await cycle(http, qid, pid, ack=_ack(body, lease=lease), group=group,
                    state_ops=[{"type": "upsert", "key": "k", "value": {"n": 1}}],
                    push=[{"queue": queue_name + "-sink", "payload": {"x": 1}}])
    assert r.status_code == 200
    assert r.json()["success"] is False and r.json()["error"] == "invalid or expired lease"
    assert await state_of(db, qid) == {}
    assert await sink_count(db, queue_name + "-sink") == 0
    after = await cursor_row(db, queue_name, group)
    assert before is not None and after is not None
    assert (after["committed"], after["worker_id"]) == (before["committed"], before["worker_id"])


async def test_an_acked_cycle_resent_after_a_lost_answer_is_not_applied_twice(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    qid, body = await _setup(http, queue_name)
    pid, group = body["messages"][0]["partitionId"], GROUP_OF.format(queue_name)
    args: dict[str, Any] = {
        "ack": _ack(body), "group": group,
        "state_ops": [{"type": "upsert", "key": "count", "value": {"n": 5}}],
        "push": [{"queue": queue_name + "-sink", "payload": {"sum": 10}}]}
    first = await cycle(http, qid, pid, **args)
    assert first.json()["success"] is True, first.text
    assert first.json()["ack_result"] == {"success": True, "count": 5, "lease_released": True,
                                          "dlq": False}
    again = await cycle(http, qid, pid, **args)
    assert again.json() == {**again.json(), "success": False,
                            "error": "invalid or expired lease"}
    assert await sink_count(db, queue_name + "-sink") == 1
    row = await cursor_row(db, queue_name, group)
    assert row is not None and row["committed"] == 4 and row["worker_id"] is None


async def test_partial_ack_keeps_the_lease_and_a_resent_one_is_not_applied_twice(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    qid, body = await _setup(http, queue_name, n=6)
    pid, group = body["messages"][0]["partitionId"], GROUP_OF.format(queue_name)
    args: dict[str, Any] = {
        "ack": _ack(body, upto=2), "group": group, "release": False,
        "push": [{"queue": queue_name + "-sink", "payload": {"ok": 2}}]}
    first = await cycle(http, qid, pid, **args)
    assert first.json()["success"] is True, first.text
    assert first.json()["ack_result"]["count"] == 2
    assert first.json()["ack_result"]["lease_released"] is False
    row = await cursor_row(db, queue_name, group)
    assert row is not None
    assert (row["committed"], row["batch_end"], row["worker_id"]) == (1, 5, body["leaseId"])
    again = await cycle(http, qid, pid, **args)
    assert again.json()["success"] is False
    assert again.json()["error"] == "cycle already applied"
    row = await cursor_row(db, queue_name, group)
    assert row is not None and row["committed"] == 1
    assert await sink_count(db, queue_name + "-sink") == 1
    # The next partial ack, and a nack that releases without moving the cursor.
    nxt = await cycle(http, qid, pid, ack=_ack(body, upto=3, count=1), group=group,
                      release=False)
    assert nxt.json()["ack_result"]["count"] == 1
    nack = await cycle(http, qid, pid, ack=_ack(body, status="failed"), group=group)
    assert nack.json()["ack_result"] == {"success": True, "count": 0, "lease_released": True,
                                         "dlq": False}
    row = await cursor_row(db, queue_name, group)
    assert row is not None and (row["committed"], row["worker_id"]) == (2, None)
    redelivered = await runner_pop(http, queue_name)
    assert [m["data"] for m in redelivered["messages"]] == [{"i": 3}, {"i": 4}, {"i": 5}]


async def test_an_idle_flush_resent_after_a_lost_answer_pushes_once(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    qid, body = await _setup(http, queue_name)
    pid = body["messages"][0]["partitionId"]
    await cycle(http, qid, pid, ack=None, group=GROUP_OF.format(queue_name),
                state_ops=[{"type": "upsert", "key": "w1", "value": {"acc": 3}}])
    flush: dict[str, Any] = {
        "ack": None, "group": GROUP_OF.format(queue_name),
        "state_ops": [{"type": "delete", "key": "w1"}],
        "push": [{"queue": queue_name + "-sink", "payload": {"value": 3}}]}
    first = await cycle(http, qid, pid, **flush)
    assert first.json()["push_results"][0]["status"] == "queued"
    assert first.json()["ack_result"] is None
    again = await cycle(http, qid, pid, **flush)
    assert again.json()["success"] is True
    assert again.json()["push_results"][0]["status"] == "duplicate"
    assert again.json()["push_results"][0]["message_ids"] == \
        first.json()["push_results"][0]["message_ids"]
    assert await sink_count(db, queue_name + "-sink") == 1
    assert await state_of(db, qid) == {}
    # Another window with the same sum is another cycle: it is pushed.
    await cycle(http, qid, pid, ack=None, group=GROUP_OF.format(queue_name),
                state_ops=[{"type": "upsert", "key": "w2", "value": {"acc": 3}}])
    other = await cycle(http, qid, pid, ack=None, group=GROUP_OF.format(queue_name),
                        state_ops=[{"type": "delete", "key": "w2"}],
                        push=[{"queue": queue_name + "-sink", "payload": {"value": 3}}])
    assert other.json()["push_results"][0]["status"] == "queued"
    assert await sink_count(db, queue_name + "-sink") == 2


async def test_two_runners_racing_on_one_partition_commit_one_cycle_per_lease(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    qid, body = await _setup(http, queue_name)
    pid, group = body["messages"][0]["partitionId"], GROUP_OF.format(queue_name)
    # Two runners both computed a cycle for the same leased batch (one of them resent it).
    cycles = [cycle(http, qid, pid, ack=_ack(body), group=group,
                    state_ops=[{"type": "upsert", "key": "by", "value": {"runner": n}}],
                    push=[{"queue": queue_name + "-sink", "payload": {"runner": n}}])
              for n in range(8)]
    answers = [r.json() for r in await asyncio.gather(*cycles)]
    assert sum(a["success"] for a in answers) == 1
    winner = next(i for i, a in enumerate(answers) if a["success"])
    assert await state_of(db, qid) == {"by": f'{{"runner": {winner}}}'}
    assert await sink_count(db, queue_name + "-sink") == 1


async def test_state_get_filters_and_orders_by_key_bytes(
        http: httpx.AsyncClient, queue_name: str) -> None:
    qid, body = await _setup(http, queue_name)
    pid = body["messages"][0]["partitionId"]
    ops = [{"type": "upsert", "key": k, "value": v} for k, v in [
        ("b\x1fw1", {"windowEnd": 100}), ("b\x1fw2", {"windowEnd": 300}),
        ("a%_", {"x": 1}), ("B", {"windowEnd": "100"})]]
    r = await cycle(http, qid, pid, ack=None, group="g", state_ops=ops)
    assert r.json()["state_ops_applied"] == 4

    async def keys(**filters: Any) -> list[str]:
        got = await http.post("/streams/v1/state/get", json={
            "query_id": qid, "partition_id": pid, **filters})
        assert got.status_code == 200, got.text
        return [row["key"] for row in got.json()["rows"]]
    assert await keys(keys=[]) == ["B", "a%_", "b\x1fw1", "b\x1fw2"]
    assert await keys(key_prefix="b\x1f") == ["b\x1fw1", "b\x1fw2"]
    assert await keys(key_prefix="a%") == ["a%_"]
    assert await keys(ripe_at_or_before=200) == ["b\x1fw1"]
    assert await keys(keys=["B", "zz"]) == ["B"]
    assert await keys(query_id="00000000-0000-0000-0000-000000000000") == []
    missing = await http.post("/streams/v1/state/get", json={"query_id": qid})
    assert missing.status_code == 400
    assert missing.json() == {"success": False, "rows": [],
                              "error": "query_id and partition_id are required"}


async def test_state_get_refuses_a_read_over_its_bounds_naming_the_limit(
        database_url: str, queue_name: str) -> None:
    # Every read of the runtime takes a partition's whole state (keys []): it was answered
    # whatever its size (up to a MiB a key, keys without number), built whole in the worker.
    limit = 64 * 1024
    with BrokerProcess(database_url, workers=1,
                       env={"QUEEN_LIST_MAX_BYTES": str(limit)}) as broker:
        async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
            qid, body = await _setup(http, queue_name)
            pid = body["messages"][0]["partitionId"]
            ops = [{"type": "upsert", "key": f"k{i:03d}", "value": {"s": "x" * 1000}}
                   for i in range(100)]  # about 100 KB of state
            r = await cycle(http, qid, pid, ack=None, group="g", state_ops=ops)
            assert r.json()["state_ops_applied"] == 100

            async def read(**filters: Any) -> httpx.Response:
                return await http.post("/streams/v1/state/get", json={
                    "query_id": qid, "partition_id": pid, **filters})

            whole = await read(keys=[])
            assert whole.status_code == 413, whole.text[:200]
            answer = whole.json()
            assert answer["success"] is False and answer["rows"] == []
            assert "QUEEN_LIST_MAX_BYTES" in answer["error"] and str(limit) in answer["error"]
            narrowed = await read(key_prefix="k00")
            assert narrowed.status_code == 200
            assert [row["key"] for row in narrowed.json()["rows"]] == [f"k00{i}" for i in range(10)]
            many = await read(keys=[f"k{i:03d}" for i in range(4097)])
            assert many.status_code == 413
            assert many.json()["error"] == "4097 keys is over the limit of 4096"
            assert len((await read(keys=[f"k{i:03d}" for i in range(40)])).json()["rows"]) == 40


async def test_registration_answers_fresh_same_conflict_and_reset(
        http: httpx.AsyncClient, queue_name: str) -> None:
    body = {"name": queue_name, "source_queue": queue_name, "config_hash": "h1"}
    fresh = (await http.post("/streams/v1/queries", json=body)).json()
    assert (fresh["fresh"], fresh["reset"]) == (True, False)
    same = (await http.post("/streams/v1/queries", json=body)).json()
    assert (same["query_id"], same["fresh"]) == (fresh["query_id"], False)
    conflict = await http.post("/streams/v1/queries", json={**body, "config_hash": "h2"})
    assert conflict.status_code == 409
    assert conflict.json()["error"].startswith(
        f"config_hash mismatch: operator chain changed for queryId '{queue_name}'.")
    reset = (await http.post("/streams/v1/queries",
                             json={**body, "config_hash": "h2", "reset": True})).json()
    assert (reset["query_id"], reset["reset"]) == (fresh["query_id"], True)
    for field in ("name", "source_queue", "config_hash"):
        r = await http.post("/streams/v1/queries", json={**body, field: ""})
        assert (r.status_code, r.json()) == (400, {"error": f"{field} is required"})


@pytest.mark.parametrize("case", ["unknown_type", "nul_key", "nul_value", "huge_value",
                                  "too_many_ops", "no_query", "bad_types", "negative_count"])
async def test_hostile_cycles_are_4xx_and_change_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str, case: str) -> None:
    qid, body = await _setup(http, queue_name)
    pid, group = body["messages"][0]["partitionId"], GROUP_OF.format(queue_name)
    good = {"type": "upsert", "key": "k", "value": {"n": 1}}
    ops: list[Any] = [good]
    payload: dict[str, Any] = {"query_id": qid, "partition_id": pid, "consumer_group": group,
                               "push_items": [{"queue": queue_name + "-sink", "payload": 1}],
                               "ack": _ack(body)}
    if case == "unknown_type":
        ops.append({"type": "merge", "key": "k"})
    elif case == "nul_key":
        ops.append({"type": "upsert", "key": "a\u0000b", "value": {}})
    elif case == "nul_value":
        ops.append({"type": "upsert", "key": "v", "value": {"s": "a\u0000"}})
    elif case == "huge_value":
        ops.append({"type": "upsert", "key": "v", "value": {"s": "x" * (2 << 20)}})
    elif case == "too_many_ops":
        ops = [{"type": "upsert", "key": f"k{i}", "value": i} for i in range(10_000)]
    elif case == "no_query":
        payload["query_id"] = ""
    elif case == "bad_types":
        payload["state_ops"] = "nope"
    elif case == "negative_count":
        payload["ack"] = {**_ack(body), "count": -1}
    payload.setdefault("state_ops", ops)
    r = await http.post("/streams/v1/cycle", json=payload)
    assert 400 <= r.status_code < 500, r.text
    assert "error" in r.json()
    if case == "unknown_type":
        assert r.json()["error"] == "Unknown state_op type: merge"
    assert await state_of(db, qid) == {}
    assert await sink_count(db, queue_name + "-sink") == 0
    row = await cursor_row(db, queue_name, group)
    assert row is not None and row["committed"] == -1 and row["worker_id"] == body["leaseId"]


async def test_deleting_the_source_queue_or_the_query_removes_its_state(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    qid, body = await _setup(http, queue_name)
    pid = body["messages"][0]["partitionId"]
    op = [{"type": "upsert", "key": "k", "value": 1}]
    assert (await cycle(http, qid, pid, ack=None, group="g", state_ops=op)).json()["success"]
    listed = (await http.get("/streams/v1/queries")).json()["queries"]
    mine = next(q for q in listed if q["name"] == queue_name)
    assert mine["partitions"][0]["stateKeys"] == 1 and mine["partitions"][0]["cycles"] == 1
    assert (await http.delete(f"/api/v1/resources/queues/{queue_name}")).status_code == 200
    assert await state_of(db, qid) == {}
    r = await http.delete(f"/streams/v1/queries/{queue_name}")
    assert r.json() == {"deleted": True, "name": queue_name}
    assert await db.fetchval("SELECT count(*) FROM queen.stream_queries WHERE id = $1::uuid",
                             qid) == 0


async def test_a_reset_racing_cycles_of_its_query_waits_for_them_and_deadlocks_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    qid, body = await _setup(http, queue_name)
    pid = body["messages"][0]["partitionId"]
    cycles = [cycle(http, qid, pid, ack=None, group="g",
                    state_ops=[{"type": "upsert", "key": f"k{n}", "value": n}],
                    push=[{"queue": queue_name + "-sink", "payload": {"n": n}}])
              for n in range(10)]
    reset = http.post("/streams/v1/queries", json={
        "name": queue_name, "source_queue": queue_name, "config_hash": "h2", "reset": True})
    answers = await asyncio.gather(*cycles, reset)
    assert [a.status_code for a in answers] == [200] * 11
    assert all(a.json()["success"] for a in answers[:10])
    assert answers[10].json()["reset"] is True
    # Every cycle committed either before the reset (its state wiped) or after it (kept).
    after = await state_of(db, qid)
    assert await sink_count(db, queue_name + "-sink") == 10
    assert set(after) <= {f"k{n}" for n in range(10)}
