"""A page of `GET /api/v1/messages` keeps within QUEEN_LIST_MAX_BYTES (core/admin/messages.py):
the listing walks segments a byte-bounded page at a time (schema/queries/dlq.sql,
message_segments_newest) holding no payload, and reads only the payloads of the rows the page
keeps; the page ends where those pass the budget (each counted twice: it goes out as `data`
and as `payload`), its first row kept, and says so (`truncated`, `nextOffset`). Paging on from
`nextOffset` lists every message once. Before, a page carried its whole `limit` (up to 1000
messages of up to MAX_BODY_BYTES, each twice) whatever the bytes."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support import ANSWER_BUDGET, push_items

pytestmark = pytest.mark.citus

BUDGET = ANSWER_BUDGET
SIZE = 100_000  # a payload's bytes (incompressible): about five rows fit in half the budget


@pytest.fixture
def client(budget_client: httpx.AsyncClient) -> httpx.AsyncClient:
    return budget_client  # the session's broker with 1 MiB budgets (tests/conftest.py)


def _big(n: int, size: int) -> dict[str, Any]:
    return {"n": n, "b": base64.b64encode(os.urandom(size * 3 // 4)).decode()}


async def _page(client: httpx.AsyncClient, queue: str, offset: int) -> dict[str, Any]:
    r = await client.get("/api/v1/messages", params={"queue": queue, "limit": 1000,
                                                     "offset": offset})
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_a_page_ends_within_the_budget_and_next_offset_lists_the_rest(
        client: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    # Two partitions of large messages (a segment each), pushed in turn, and one of small
    # messages in one segment (a page reads it once for the rows it keeps).
    for i in range(12):
        await push_items(client, queue_name, [_big(i, SIZE)], partition=f"P{i % 2}",
                         prefix=f"big{i}-")
    await push_items(client, queue_name, [{"n": 100 + i} for i in range(30)],
                     partition="small", prefix="s")
    # The status listing answers no payload: it is never cut, and gives the whole order.
    r = await client.get(f"/api/v1/status/queues/{queue_name}/messages",
                         params={"limit": 1000})
    assert r.status_code == 200 and "truncated" not in r.json()
    order = [m["transactionId"] for m in r.json()["messages"]]
    assert len(order) == 42 and r.json()["total"] == 42
    seen: list[str] = []
    offset, pages = 0, 0
    while True:
        page = await _page(client, queue_name, offset)
        assert page["total"] == 42 and page["pagination"] == {"limit": 1000, "offset": offset}
        got = page["messages"]
        if not got:
            assert page["truncated"] is False and page["nextOffset"] == offset
            break
        pages += 1
        assert pages <= 42, "no progress"
        payloads = [len(json.dumps(m["data"])) for m in got]
        assert 2 * sum(payloads) <= BUDGET, payloads
        assert all(m["data"] == m["payload"] for m in got)
        assert len(got) >= 4 or len(seen) + len(got) == 42
        seen += [m["transactionId"] for m in got]
        assert page["nextOffset"] == offset + len(got)
        assert page["truncated"] is (len(seen) < 42)
        offset = page["nextOffset"]
    assert pages >= 3
    assert seen == order  # newest first, each once
    assert [m["data"]["n"] for m in (await _page(client, queue_name, 41))["messages"]] == [0]
    assert await db.fetchval(
        "SELECT sum(p.last_offset - p.log_start + 1) FROM queen.log_partitions p"
        " JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1", queue_name) == 42


async def test_a_message_larger_than_the_budget_is_listed_alone(
        client: httpx.AsyncClient, queue_name: str) -> None:
    for i in range(3):
        await push_items(client, queue_name, [_big(i, BUDGET * 3 // 2)], prefix=f"b{i}-")
    for n, offset in zip((2, 1, 0), range(3), strict=True):
        page = await _page(client, queue_name, offset)
        assert [m["data"]["n"] for m in page["messages"]] == [n]
        assert page["truncated"] is (n > 0) and page["nextOffset"] == offset + 1


async def test_a_lookup_past_the_index_walks_segments_larger_than_the_budget(
        client: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    """The fallback scan reads its segments a page at a time within the budget: here one
    segment a page, and the oldest is still found."""
    for i in range(4):
        await push_items(client, queue_name, [_big(i, BUDGET * 3 // 4)], prefix=f"f{i}-")
    r = await client.get("/api/v1/status/queues/" + queue_name + "/messages")
    pid = r.json()["messages"][0]["partitionId"]
    await db.execute("DELETE FROM queen.log_txn_index WHERE partition_id = $1", int(pid))
    r = await client.get(f"/api/v1/messages/{pid}/f0-0")
    assert r.status_code == 200 and r.json()["data"]["n"] == 0
