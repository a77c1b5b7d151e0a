"""A page of `GET /api/v1/traces/by-name/{name}` keeps within QUEEN_LIST_MAX_BYTES
(schema/queries/traces.sql, traces_by_name; core/admin/traces.py): the page ends where its
traces' data and their messages' payloads pass the budget, its first trace kept, and says so
(`truncated`, `nextOffset`); paging on from `nextOffset` lists every trace once. Before, a page
carried its whole `limit` (up to 1000 traces, each with data and a message of up to
MAX_BODY_BYTES) whatever the bytes."""

from __future__ import annotations

import base64
import json
import os
import uuid
from typing import Any

import httpx
import pytest

from tests.support import ANSWER_BUDGET

pytestmark = pytest.mark.citus

BUDGET = ANSWER_BUDGET
SIZE = 100_000  # a payload's or a trace's bytes (incompressible)
COUNT = 16


@pytest.fixture
def client(budget_client: httpx.AsyncClient) -> httpx.AsyncClient:
    return budget_client  # the session's broker with 1 MiB budgets (tests/conftest.py)


def _blob(size: int) -> str:
    return base64.b64encode(os.urandom(size * 3 // 4)).decode()


async def _traced(client: httpx.AsyncClient, queue: str, name: str, n: int, *,
                  payload: int, data: int) -> None:
    """A message of about `payload` bytes (a segment of its own) and a trace of it named
    `name` with about `data` bytes."""
    r = await client.post("/api/v1/push", json={"items": [
        {"queue": queue, "payload": {"n": n, "b": _blob(payload)}, "transactionId": f"m{n}"}]})
    assert r.status_code == 201, r.text
    r = await client.post("/api/v1/traces", json={
        "transactionId": f"m{n}", "partitionId": r.json()[0]["partition_id"],
        "traceNames": [name], "data": {"n": n, "b": _blob(data)}})
    assert r.status_code == 201, r.text


async def _page(client: httpx.AsyncClient, name: str, offset: int) -> dict[str, Any]:
    r = await client.get(f"/api/v1/traces/by-name/{name}", params={"limit": 100,
                                                                  "offset": offset})
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_a_page_ends_within_the_budget_and_next_offset_lists_the_rest(
        client: httpx.AsyncClient, queue_name: str) -> None:
    name = f"budget-{uuid.uuid4().hex[:10]}"
    for n in range(COUNT):  # traces of large data and of small data with large messages
        await _traced(client, queue_name, name, n, payload=SIZE if n % 2 else 100,
                      data=100 if n % 2 else SIZE)
    seen: list[int] = []
    offset, pages = 0, 0
    while True:
        page = await _page(client, name, offset)
        assert page["total"] == COUNT
        got = page["traces"]
        if not got:
            assert page["truncated"] is False and page["nextOffset"] == offset
            break
        pages += 1
        assert pages <= COUNT, "no progress"
        held = sum(len(json.dumps(t["data"])) + len(json.dumps(t["message_payload"]))
                   for t in got)
        assert held <= BUDGET
        assert len(got) >= 4 or len(seen) + len(got) == COUNT
        assert all(t["message_payload"]["n"] == t["data"]["n"] for t in got)
        seen += [t["data"]["n"] for t in got]
        assert page["nextOffset"] == offset + len(got)
        assert page["truncated"] is (len(seen) < COUNT)
        offset = page["nextOffset"]
    assert pages >= 2
    assert seen == list(range(COUNT - 1, -1, -1))  # newest first, each once


async def test_a_trace_larger_than_the_budget_is_listed_alone(
        client: httpx.AsyncClient, queue_name: str) -> None:
    name = f"huge-{uuid.uuid4().hex[:10]}"
    for n in range(3):  # the data alone, then the message alone, pass the budget
        await _traced(client, queue_name, name, n, payload=BUDGET * 3 // 2 if n == 1 else 100,
                      data=100 if n == 1 else BUDGET * 3 // 2)
    for n, offset in zip((2, 1, 0), range(3), strict=True):
        page = await _page(client, name, offset)
        assert [t["data"]["n"] for t in page["traces"]] == [n]
        assert page["traces"][0]["message_payload"]["n"] == n
        assert page["truncated"] is (n > 0) and page["nextOffset"] == offset + 1
