"""A transactionId stored twice in one partition (dedupWindowSeconds 0) is resolved by one
rule on every ack path (docs/acks.md): the earliest occurrence above the cursor. Each test
pushes the id twice, with another message between, and acks it through /ack, /ack/batch or
/transaction, in queue mode and in a named group, with every status; `pruned` first lets the
reaper prune the index row of the first occurrence (its message is older than the index
keeps rows), where the index alone would name the second one.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from core.storage.database import Database
from tests.support import (
    configure,
    cursor_row,
    dlq_rows,
    pop_json,
    prune_index_of,
    push_items,
)

# Each test runs on one PostgreSQL and on a Citus cluster (tests/conftest.py).
pytestmark = pytest.mark.citus("long")  # its Citus variant: QUEEN_CITUS_VARIANTS=all

PATHS = ["ack", "batch", "transaction"]
GROUPS = [None, "g"]


async def age_and_prune(db: asyncpg.Connection, core_db: Database, queue: str) -> None:
    await prune_index_of(db, core_db, queue)
    left = await db.fetchval(
        """SELECT count(*) FROM queen.log_txn_index i
             JOIN queen.log_partitions p ON p.id = i.partition_id
             JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1""", queue)
    assert left == 0


async def x_twice(http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
                  queue: str, *, pruned: bool, between: bool = True) -> None:
    """X "first" at offset 0, (Y "middle" at 1,) X "second" after it."""
    await configure(http, queue, dedupWindowSeconds=0, retryLimit=0, retryDelay=0)
    await push_items(http, queue, ["first"], prefix="X")
    if pruned:
        await age_and_prune(db, core_db, queue)
    if between:
        await push_items(http, queue, ["middle"], prefix="Y")
    await push_items(http, queue, ["second"], prefix="X")


async def ack_through(http: httpx.AsyncClient, path: str, items: list[dict[str, Any]],
                      group: str | None) -> list[bool]:
    """Ack `items` ({transactionId, partitionId, leaseId, status}) in one call of `path`;
    answer each item's `dlq` flag (and assert every item succeeded)."""
    if path == "ack":
        assert len(items) == 1
        r = await http.post("/api/v1/ack", json={**items[0], "consumerGroup": group})
        answers = r.json()
    elif path == "batch":
        r = await http.post("/api/v1/ack/batch", json={"acknowledgments": items,
                                                       "consumerGroup": group})
        answers = r.json()
    else:
        ops = [{"type": "ack", **item, **({"consumerGroup": group} if group else {})}
               for item in items]
        r = await http.post("/api/v1/transaction", json={
            "operations": ops, "requiredLeases": sorted({i["leaseId"] for i in items})})
        assert r.json()["success"] is True, r.text
        answers = r.json()["results"]
    assert r.status_code == 200 and all(a["success"] for a in answers), r.text
    return [a["dlq"] for a in answers]


def ack_of_x(message: dict[str, Any], status: str) -> dict[str, Any]:
    return {"transactionId": "X0", "partitionId": message["partitionId"],
            "leaseId": message["leaseId"], "status": status, "error": f"{status} X"}


async def state(db: asyncpg.Connection, queue: str, group: str | None) -> tuple[Any, ...]:
    """(committed, lease holder, retry count, dead letters as (offset, payload))."""
    row = await cursor_row(db, queue, group or "__QUEUE_MODE__")
    assert row is not None
    letters = [(d["msg_offset"], d["payload_text"]) for d in await dlq_rows(db, queue)]
    return row["committed"], row["worker_id"], row["retry_count"], letters


async def next_data(http: httpx.AsyncClient, queue: str, group: str | None) -> Any:
    body = await pop_json(http, queue, **({"consumerGroup": group} if group else {}))
    return None if body is None else body["messages"][0]["data"]


# What acking X with each status does when X names offset 0 (the earliest occurrence above
# the cursor): (committed, holder, retries, dead letters), the next pop's first message.
EXPECTED = {
    "completed": ((0, None, 0, []), "middle"),
    "failed": ((0, None, 0, [(0, '"first"')]), "middle"),  # retryLimit 0: dead-lettered
    "dlq": ((0, None, 0, [(0, '"first"')]), "middle"),
    "retry": ((-1, None, 0, []), "first"),
}


@pytest.mark.parametrize("pruned", [False, True], ids=["indexed", "pruned"])
@pytest.mark.parametrize("status", list(EXPECTED))
@pytest.mark.parametrize("group", GROUPS, ids=["queue-mode", "group"])
@pytest.mark.parametrize("path", PATHS)
async def test_every_path_acks_the_earliest_occurrence_above_the_cursor(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database, queue_name: str,
        path: str, group: str | None, status: str, pruned: bool) -> None:
    await x_twice(http, db, core_db, queue_name, pruned=pruned)
    body = await pop_json(http, queue_name, **({"consumerGroup": group} if group else {}))
    assert body is not None
    [message] = body["messages"]
    assert message["data"] == "first"
    dlq = await ack_through(http, path, [ack_of_x(message, status)], group)
    expected_state, then = EXPECTED[status]
    assert dlq == [bool(expected_state[3])]
    assert await state(db, queue_name, group) == expected_state
    assert await next_data(http, queue_name, group) == then


@pytest.mark.parametrize("pruned", [False, True], ids=["indexed", "pruned"])
@pytest.mark.parametrize("group", GROUPS, ids=["queue-mode", "group"])
@pytest.mark.parametrize("path", ["batch", "transaction"])
async def test_two_dlq_acks_of_a_repeated_id_in_one_call_name_the_same_message(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database, queue_name: str,
        path: str, group: str | None, pruned: bool) -> None:
    """Every item of one call resolves against the cursor the call started from: both
    items name offset 0, which is dead-lettered once; the second X is delivered next."""
    await x_twice(http, db, core_db, queue_name, pruned=pruned, between=False)
    body = await pop_json(http, queue_name, batch=2,
                          **({"consumerGroup": group} if group else {}))
    assert body is not None
    assert [m["data"] for m in body["messages"]] == ["first", "second"]
    first = body["messages"][0]
    dlq = await ack_through(http, path, [ack_of_x(first, "dlq"), ack_of_x(first, "dlq")],
                            group)
    assert dlq == [True, False]
    assert await state(db, queue_name, group) == (0, None, 0, [(0, '"first"')])
    assert await next_data(http, queue_name, group) == "second"


async def test_one_batch_below_the_pruning_mark_settles_every_item(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database,
        queue_name: str) -> None:
    """Items whose index rows are gone and items the index still has, in one call: each
    resolves (one search serves every span that starts at the cursor)."""
    await configure(http, queue_name, dedupWindowSeconds=0)
    await push_items(http, queue_name, [f"old{i}" for i in range(5)], prefix="t")
    await age_and_prune(db, core_db, queue_name)
    await push_items(http, queue_name, [f"new{i}" for i in range(5)], prefix="u")
    body = await pop_json(http, queue_name, batch=10)
    assert body is not None and len(body["messages"]) == 10
    items = [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
              "leaseId": m["leaseId"], "status": "completed"} for m in body["messages"]]
    r = await http.post("/api/v1/ack/batch", json={"acknowledgments": items[::-1]})
    assert [a["success"] for a in r.json()] == [True] * 10
    assert await state(db, queue_name, None) == (9, None, 0, [])
