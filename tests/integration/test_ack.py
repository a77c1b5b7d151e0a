"""Ack routes (§4.5–4.6) and lease extension (§4.8): lease checks, no-ops, the retry budget,
the DLQ hand-off and bad input. Each test checks the cursor row, not just the answer.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from tests.support import configure, cursor_row, dlq_rows, expire_leases_of, pop_json, push_items

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all


def ack_body(message: dict[str, Any], status: str = "completed", *, lease: bool = True,
             group: str | None = None, error: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"transactionId": message["transactionId"],
                            "partitionId": message["partitionId"], "status": status,
                            "consumerGroup": group, "error": error}
    if lease:
        body["leaseId"] = message["leaseId"]
    return body


async def ack(http: httpx.AsyncClient, message: dict[str, Any], status: str = "completed",
              **kw: Any) -> dict[str, Any]:
    r = await http.post("/api/v1/ack", json=ack_body(message, status, **kw))
    assert r.status_code == 200, r.text
    answer = r.json()
    assert isinstance(answer, list) and len(answer) == 1
    return answer[0]  # type: ignore[no-any-return]


async def test_completed_ack_commits_releases_and_answers_the_documented_item(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["a"])
    body = await pop_json(http, queue_name)
    assert body is not None
    item = await ack(http, body["messages"][0])
    assert item == {"index": 0, "transactionId": "t0", "success": True, "error": None,
                    "leaseReleased": True, "dlq": False}
    row = await cursor_row(db, queue_name)
    assert row is not None
    assert (row["committed"], row["worker_id"], row["batch_end"]) == (0, None, None)


async def test_ack_with_a_stale_lease_id_moves_nothing_and_answers_success_false(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["a", "b"])
    first = await pop_json(http, queue_name, batch=2)
    assert first is not None
    await expire_leases_of(db, queue_name)
    second = await pop_json(http, queue_name, batch=2)  # the span goes to a new holder
    assert second is not None and second["leaseId"] != first["leaseId"]
    for status in ("completed", "failed", "dlq", "retry"):
        item = await ack(http, first["messages"][1], status)
        assert item["success"] is False
        assert item["error"] == "invalid or expired lease"
    foreign = {**first["messages"][0], "leaseId": "not-a-lease"}
    assert (await ack(http, foreign))["success"] is False
    row = await cursor_row(db, queue_name)
    assert row is not None
    assert (row["committed"], row["worker_id"], row["retry_count"]) == (-1, second["leaseId"], 0)
    assert await dlq_rows(db, queue_name) == []


async def test_ack_with_an_expired_lease_is_refused_even_before_anyone_reclaims(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["a"])
    body = await pop_json(http, queue_name)
    assert body is not None
    await expire_leases_of(db, queue_name)
    item = await ack(http, body["messages"][0])
    assert (item["success"], item["error"]) == (False, "invalid or expired lease")
    assert (await cursor_row(db, queue_name))["committed"] == -1  # type: ignore[index]


async def test_ack_without_lease_id_skips_the_lease_check_and_commits(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["a", "b"])
    body = await pop_json(http, queue_name, batch=2)
    assert body is not None
    await expire_leases_of(db, queue_name)
    item = await ack(http, body["messages"][1], lease=False)
    assert item["success"] is True
    assert (await cursor_row(db, queue_name))["committed"] == 1  # type: ignore[index]


async def test_acking_an_already_committed_offset_is_a_noop(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["a", "b"])
    body = await pop_json(http, queue_name, batch=2)
    assert body is not None
    assert (await ack(http, body["messages"][1], lease=False))["success"] is True
    again = await ack(http, body["messages"][0], lease=False)
    assert again["success"] is True and again["noop"] is True
    twice = await ack(http, body["messages"][1], lease=False)
    assert twice["noop"] is True
    refused = await ack(http, body["messages"][0], "failed", lease=False)
    assert refused["success"] is False
    assert refused["error"].startswith("already committed")
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["retry_count"]) == (1, 0)


async def test_unknown_transaction_id_and_unknown_consumer_answer_success_false(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await push_items(http, queue_name, ["a"])
    body = await pop_json(http, queue_name)
    assert body is not None
    message = body["messages"][0]
    item = await ack(http, {**message, "transactionId": "nope"})
    assert (item["success"], item["leaseReleased"]) == (False, False)
    assert item["error"].startswith("unresolvable: ")
    item = await ack(http, message, group="never-popped", lease=False)
    assert (item["success"], item["error"]) == (False, "consumer not found")
    item = await ack(http, {**message, "partitionId": "999999999999"}, lease=False)
    assert item["success"] is False


async def test_retry_releases_the_lease_without_spending_budget(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, retryLimit=0, retryDelay=0)
    await push_items(http, queue_name, ["a", "b"])
    for _ in range(3):  # with retryLimit 0 a single failed would dead-letter at once
        body = await pop_json(http, queue_name, batch=2)
        assert body is not None and [m["data"] for m in body["messages"]] == ["a", "b"]
        item = await ack(http, body["messages"][0], "retry")
        assert (item["success"], item["leaseReleased"], item["dlq"]) == (True, True, False)
        row = await cursor_row(db, queue_name)
        assert row is not None
        assert (row["committed"], row["retry_count"], row["worker_id"]) == (-1, 0, None)
    assert await dlq_rows(db, queue_name) == []


async def test_failed_spends_the_retry_budget_then_dead_letters_with_payload_and_error(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, retryLimit=2, retryDelay=0)
    await push_items(http, queue_name, [{"poison": True}, "next"])
    for attempt in (1, 2):
        body = await pop_json(http, queue_name, consumerGroup="g")
        assert body is not None and body["messages"][0]["data"] == {"poison": True}
        item = await ack(http, body["messages"][0], "failed", group="g", error=f"boom {attempt}")
        assert (item["success"], item["dlq"], item["leaseReleased"]) == (True, False, True)
        row = await cursor_row(db, queue_name, "g")
        assert row is not None
        assert (row["committed"], row["retry_count"], row["worker_id"]) == (-1, attempt, None)
    body = await pop_json(http, queue_name, consumerGroup="g")
    assert body is not None and body["messages"][0]["transactionId"] == "t0"
    item = await ack(http, body["messages"][0], "failed", group="g", error="boom 3")
    assert (item["success"], item["dlq"]) == (True, True)
    row = await cursor_row(db, queue_name, "g")
    assert row is not None and (row["committed"], row["retry_count"]) == (0, 0)
    [dead] = await dlq_rows(db, queue_name)
    assert dead["payload_text"] == '{"poison":true}'
    assert (dead["error_message"], dead["transaction_id"], dead["consumer_group"],
            dead["msg_offset"], dead["retry_count"]) == ("boom 3", "t0", "g", 0, 2)
    assert str(dead["message_id"]) == body["messages"][0]["id"]
    body = await pop_json(http, queue_name, consumerGroup="g")
    assert body is not None and [m["data"] for m in body["messages"]] == ["next"]
    # The other groups are untouched by g's hand-off.
    body = await pop_json(http, queue_name, consumerGroup="h")
    assert body is not None and body["messages"][0]["data"] == {"poison": True}


async def test_dlq_status_dead_letters_at_once_and_default_error_text_is_used(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["x"])
    body = await pop_json(http, queue_name)
    assert body is not None
    item = await ack(http, body["messages"][0], "dlq")
    assert (item["success"], item["dlq"]) == (True, True)
    [dead] = await dlq_rows(db, queue_name)
    assert (dead["error_message"], dead["retry_count"], dead["payload_text"]) == (
        "Retries exhausted", 0, '"x"')
    assert (await cursor_row(db, queue_name))["committed"] == 0  # type: ignore[index]


async def test_queue_with_dlq_disabled_drops_the_exhausted_message(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, retryLimit=0, deadLetterQueue=False,
                    dlqAfterMaxRetries=False)
    await push_items(http, queue_name, ["doomed", "fine"])
    body = await pop_json(http, queue_name)
    assert body is not None
    item = await ack(http, body["messages"][0], "failed", error="nope")
    assert (item["success"], item["dlq"], item["leaseReleased"]) == (True, False, True)
    assert await dlq_rows(db, queue_name) == []
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["retry_count"]) == (0, 0)
    body = await pop_json(http, queue_name)
    assert body is not None and body["messages"][0]["data"] == "fine"


async def test_only_one_flag_false_keeps_the_dlq_enabled(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, retryLimit=0, deadLetterQueue=False)
    await push_items(http, queue_name, ["doomed"])
    body = await pop_json(http, queue_name)
    assert body is not None
    assert (await ack(http, body["messages"][0], "failed"))["dlq"] is True
    assert len(await dlq_rows(db, queue_name)) == 1


async def test_lease_extend_without_body_extends_every_partition_of_the_lease(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, leaseTime=5)
    await push_items(http, queue_name, ["a"], partition="A", prefix="a")
    await push_items(http, queue_name, ["b"], partition="B", prefix="b")
    body = await pop_json(http, queue_name, batch=10, partitions=2)
    assert body is not None and body["partitionsClaimed"] == 2
    lease = body["leaseId"]
    r = await http.post(f"/api/v1/lease/{lease}/extend")  # no body at all, like the client
    assert r.status_code == 200, r.text
    answer = r.json()
    assert (answer["leaseId"], answer["success"], answer["renewed"]) == (lease, True, 2)
    assert answer["newExpiresAt"] == answer["expiresAt"] == answer["lease_expires_at"]
    assert answer["newExpiresAt"].endswith("Z")
    left = await db.fetch(
        "SELECT extract(epoch FROM lease_expires_at - now()) AS s FROM queen.log_consumers "
        "WHERE worker_id = $1", lease)
    assert len(left) == 2 and all(55 < float(r["s"]) <= 60 for r in left)
    r = await http.post(f"/api/v1/lease/{lease}/extend", json={"seconds": 10})
    assert r.json()["renewed"] == 2  # never shortens: max(current, now + 10)
    left = await db.fetch("SELECT extract(epoch FROM lease_expires_at - now()) AS s "
                          "FROM queen.log_consumers WHERE worker_id = $1", lease)
    assert all(float(r["s"]) > 55 for r in left)


async def test_lease_extend_does_not_revive_expired_released_or_unknown_leases(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["a", "b"])
    body = await pop_json(http, queue_name)
    assert body is not None
    await expire_leases_of(db, queue_name)
    for lease in (body["leaseId"], "unknown-lease"):
        r = await http.post(f"/api/v1/lease/{lease}/extend", content=b"")
        answer = r.json()
        assert r.status_code == 200
        assert (answer["success"], answer["renewed"], answer["newExpiresAt"]) == (False, 0, None)
        assert answer["error"]
    row = await cursor_row(db, queue_name)
    assert row is not None and row["lease_live"] is False
    body = await pop_json(http, queue_name)
    assert body is not None
    await ack(http, body["messages"][0])
    r = await http.post(f"/api/v1/lease/{body['leaseId']}/extend")
    assert r.json()["success"] is False


@pytest.mark.parametrize(("path", "body", "fragment"), [
    ("/api/v1/ack", {"partitionId": "1"}, "transactionId is required"),
    ("/api/v1/ack", {"transactionId": "t"}, "partitionId is required"),
    ("/api/v1/ack", {"transactionId": 5, "partitionId": "1"}, "transactionId"),
    ("/api/v1/ack", {"transactionId": "t", "partitionId": 1}, "partitionId"),
    ("/api/v1/ack", {"transactionId": "t", "partitionId": "1", "leaseId": 3}, "leaseId"),
    ("/api/v1/ack", [1, 2], "object"),
    ("/api/v1/ack/batch", {}, "acknowledgments array is required"),
    ("/api/v1/ack/batch", {"acknowledgments": "x"}, "acknowledgments array is required"),
    ("/api/v1/ack/batch", {"acknowledgments": [5]}, "acknowledgments[0] must be an object"),
    ("/api/v1/ack/batch", {"acknowledgments": [{"transactionId": "t", "partitionId": "1"},
                                               {"transactionId": "t"}]},
     "acknowledgments[1].partitionId"),
    ("/api/v1/lease/x/extend", {"seconds": -1}, "seconds"),
    ("/api/v1/lease/x/extend", {"seconds": "ten"}, "seconds"),
])
async def test_bad_ack_or_extend_body_answers_400_naming_the_problem(
        http: httpx.AsyncClient, path: str, body: Any, fragment: str) -> None:
    r = await http.post(path, json=body)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert fragment in r.json()["error"]


async def test_malformed_ack_json_answers_400_and_an_empty_body_names_the_missing_key(
        http: httpx.AsyncClient) -> None:
    r = await http.post("/api/v1/ack", content=b"{not json",
                        headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]
    r = await http.post("/api/v1/ack")
    assert r.status_code == 400 and "transactionId" in r.json()["error"]


async def test_a_bad_item_in_a_batch_ack_applies_none_of_the_batch(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await push_items(http, queue_name, ["a", "b"])
    body = await pop_json(http, queue_name, batch=2)
    assert body is not None
    good = ack_body(body["messages"][1])
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [good, "junk"]})
    assert r.status_code == 400
    row = await cursor_row(db, queue_name)
    assert row is not None and (row["committed"], row["worker_id"]) == (-1, body["leaseId"])


async def test_each_mode_partial_acks_keep_the_lease_and_a_later_failure_redelivers_from_it(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await configure(http, queue_name, retryDelay=0)  # redelivery at once
    await push_items(http, queue_name, ["m0", "m1", "m2"])
    body = await pop_json(http, queue_name, batch=3, consumerGroup="g")
    assert body is not None
    m0, m1, _ = body["messages"]
    first = await ack(http, m0, group="g")
    assert (first["success"], first["leaseReleased"]) == (True, False)
    assert await pop_json(http, queue_name, consumerGroup="g") is None  # still leased
    failed = await ack(http, m1, "failed", group="g", error="bad m1")
    assert (failed["success"], failed["leaseReleased"], failed["dlq"]) == (True, True, False)
    row = await cursor_row(db, queue_name, "g")
    assert row is not None
    assert (row["committed"], row["retry_count"], row["worker_id"]) == (0, 1, None)
    again = await pop_json(http, queue_name, batch=3, consumerGroup="g")
    assert again is not None and [m["data"] for m in again["messages"]] == ["m1", "m2"]
    done = await ack(http, again["messages"][0], group="g")
    assert done["success"] is True
    row = await cursor_row(db, queue_name, "g")
    assert row is not None and (row["committed"], row["retry_count"]) == (1, 0)


async def test_a_batch_interleaving_groups_and_partitions_resolves_each_item_in_its_own(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    """One call whose items alternate between two groups and two partitions, not in the
    (group, partition) order queen.ack decides them in (it resolves a (group, partition)'s
    items together): every item is resolved in its own group and partition."""
    await configure(http, queue_name, retryLimit=0, retryDelay=0)
    await push_items(http, queue_name, ["a0", "a1", "a2"], partition="A", prefix="a")
    await push_items(http, queue_name, ["b0", "b1", "b2"], partition="B", prefix="b")
    partition_of: dict[str, int] = {}
    lease_of: dict[str, str] = {}
    for group in ("g1", "g2"):
        body = await pop_json(http, queue_name, batch=6, partitions=2, consumerGroup=group)
        assert body is not None and len(body["messages"]) == 6
        lease_of[group] = body["leaseId"]
        partition_of.update({m["transactionId"]: m["partitionId"] for m in body["messages"]})
    partition_of["ghost"] = partition_of["a0"]
    order = [("g2", "b1"), ("g1", "a2"), ("g1", "b0"), ("g2", "a0"), ("g1", "ghost")]
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": [
        {"transactionId": txid, "partitionId": partition_of[txid], "leaseId": lease_of[group],
         "consumerGroup": group, "status": "completed"} for group, txid in order]})
    assert r.status_code == 200, r.text
    assert [i["success"] for i in r.json()] == [True, True, True, True, False]
    assert r.json()[4]["error"].startswith("unresolvable")
    committed = {}
    for group in ("g1", "g2"):
        for partition in ("A", "B"):
            row = await cursor_row(db, queue_name, group, partition)
            assert row is not None
            committed[group, partition] = row["committed"]
    assert committed == {("g1", "A"): 2, ("g1", "B"): 0, ("g2", "A"): 0, ("g2", "B"): 1}
