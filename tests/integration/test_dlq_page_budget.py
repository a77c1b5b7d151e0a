"""A page of `GET /api/v1/dlq` keeps within QUEEN_LIST_MAX_BYTES (schema/queries/dlq.sql,
dlq_page; core/admin/dlq.py): the page ends where its rows' bytes pass the budget, its first
row kept, and says so (`truncated`, `nextOffset`); paging on from `nextOffset` lists every
dead letter once. Before, a page carried its whole `limit` (up to 10 000 rows, each with its
message of up to MAX_BODY_BYTES) whatever the bytes."""

from __future__ import annotations

import base64
import os
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support import ANSWER_BUDGET, pop_json, push_items

pytestmark = pytest.mark.citus

BUDGET = ANSWER_BUDGET
SIZE = 100_000  # a payload's bytes (incompressible): about ten rows fit in the budget
COUNT = 24


@pytest.fixture
def client(budget_client: httpx.AsyncClient) -> httpx.AsyncClient:
    return budget_client  # the session's broker with 1 MiB budgets (tests/conftest.py)


async def _dead_letters(client: httpx.AsyncClient, queue: str, count: int, size: int) -> None:
    """`count` messages of about `size` bytes, pushed one by one (a segment each) and
    dead-lettered one by one."""
    for i in range(count):
        await push_items(client, queue, [
            {"n": i, "b": base64.b64encode(os.urandom(size * 3 // 4)).decode()}],
            prefix=f"d{i}-")
        popped = await pop_json(client, queue, batch=1)
        assert popped is not None
        [m] = popped["messages"]
        r = await client.post("/api/v1/ack", json={
            "transactionId": m["transactionId"], "partitionId": m["partitionId"],
            "leaseId": m["leaseId"], "status": "dlq", "error": "poison"})
        assert r.status_code == 200 and r.json()[0]["success"], r.text


async def _page(client: httpx.AsyncClient, queue: str, offset: int) -> dict[str, Any]:
    r = await client.get("/api/v1/dlq", params={"queue": queue, "limit": 100,
                                                 "offset": offset})
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_a_page_ends_within_the_budget_and_next_offset_lists_the_rest(
        client: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    await _dead_letters(client, queue_name, COUNT, SIZE)
    seen: list[int] = []
    offset, pages = 0, 0
    while True:
        page = await _page(client, queue_name, offset)
        assert page["total"] == COUNT
        got = page["messages"]
        if not got:
            assert page["truncated"] is False and page["nextOffset"] == offset
            break
        pages += 1
        assert pages <= COUNT, "no progress"
        assert sum(len(m["data"]["b"]) for m in got) <= BUDGET
        assert len(got) >= min(5, COUNT - len(seen))
        seen += [m["data"]["n"] for m in got]
        assert page["nextOffset"] == offset + len(got)
        assert page["truncated"] is (len(seen) < COUNT)
        offset = page["nextOffset"]
    assert pages >= 2
    assert seen == list(range(COUNT - 1, -1, -1))  # newest first, each once
    assert await db.fetchval(
        "SELECT count(*) FROM queen.log_dlq d JOIN queen.log_partitions p"
        " ON p.id = d.partition_id JOIN queen.queues q ON q.id = p.queue_id"
        " WHERE q.name = $1", queue_name) == COUNT  # listing removes nothing


async def test_a_dead_letter_larger_than_the_budget_is_listed_alone(
        client: httpx.AsyncClient, queue_name: str) -> None:
    await _dead_letters(client, queue_name, 3, BUDGET * 3 // 2)
    for n, offset in zip((2, 1, 0), range(3), strict=True):
        page = await _page(client, queue_name, offset)
        assert [m["data"]["n"] for m in page["messages"]] == [n]
        assert page["truncated"] is (n > 0) and page["nextOffset"] == offset + 1
