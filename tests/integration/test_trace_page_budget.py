"""A page of `GET /api/v1/traces/by-name/{name}` and of `GET /api/v1/traces/{pid}/{txid}`
keeps within QUEEN_LIST_MAX_BYTES (schema/queries/traces.sql, traces_by_name and
traces_of_message; core/admin/traces.py): the page ends where its traces' data (and, by name,
their messages' payloads) pass the budget, its first trace kept, and says so (`truncated`,
`nextOffset`); paging on from `nextOffset` lists every trace once. Before, a page by name
carried its whole `limit`, and a message's lookup all its traces, up to 1000 (each with data,
and by name a message, of up to MAX_BODY_BYTES) whatever the bytes; the lookup had no
`offset`."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from collections.abc import Awaitable, Callable
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


async def _message(client: httpx.AsyncClient, queue: str, n: int, payload: int) -> str:
    """A message `m{n}` of about `payload` bytes (a segment of its own); its partition id."""
    r = await client.post("/api/v1/push", json={"items": [
        {"queue": queue, "payload": {"n": n, "b": _blob(payload)}, "transactionId": f"m{n}"}]})
    assert r.status_code == 201, r.text
    return str(r.json()[0]["partition_id"])


async def _trace(client: httpx.AsyncClient, pid: str, message: int, n: int, data: int,
                 names: list[str]) -> None:
    """A trace of message `m{message}` with about `data` bytes of data that says `n`."""
    r = await client.post("/api/v1/traces", json={
        "transactionId": f"m{message}", "partitionId": pid, "traceNames": names,
        "data": {"n": n, "b": _blob(data)}})
    assert r.status_code == 201, r.text


async def _traced(client: httpx.AsyncClient, queue: str, name: str, n: int, *,
                  payload: int, data: int) -> None:
    """A message of about `payload` bytes and a trace of it named `name` with about `data`
    bytes."""
    await _trace(client, await _message(client, queue, n, payload), n, n, data, [name])


async def _get(client: httpx.AsyncClient, path: str, **params: int) -> dict[str, Any]:
    r = await client.get(path, params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def _page(client: httpx.AsyncClient, name: str, offset: int) -> dict[str, Any]:
    return await _get(client, f"/api/v1/traces/by-name/{name}", limit=100, offset=offset)


async def _walk(fetch: Callable[[int], Awaitable[dict[str, Any]]],
                count: int) -> list[list[dict[str, Any]]]:
    """The traces of every page from offset 0, following `nextOffset` to an empty page:
    each page within the budget, moving on by the traces it answered, truncated exactly
    while `count` traces are not all seen."""
    pages: list[list[dict[str, Any]]] = []
    offset, seen = 0, 0
    while True:
        page = await fetch(offset)
        got = page["traces"]
        if not got:
            assert page["truncated"] is False and page["nextOffset"] == offset
            return pages
        assert len(pages) < count, "no progress"
        held = sum(len(json.dumps(t["data"])) + len(json.dumps(t.get("message_payload")))
                   for t in got)
        assert held <= BUDGET
        seen += len(got)
        assert page["nextOffset"] == offset + len(got)
        assert page["truncated"] is (seen < count)
        pages.append(got)
        offset = page["nextOffset"]


async def test_a_page_ends_within_the_budget_and_next_offset_lists_the_rest(
        client: httpx.AsyncClient, queue_name: str) -> None:
    name = f"budget-{uuid.uuid4().hex[:10]}"
    for n in range(COUNT):  # traces of large data and of small data with large messages
        await _traced(client, queue_name, name, n, payload=SIZE if n % 2 else 100,
                      data=100 if n % 2 else SIZE)

    async def fetch(offset: int) -> dict[str, Any]:
        page = await _page(client, name, offset)
        assert page["total"] == COUNT
        return page

    pages = await _walk(fetch, COUNT)
    assert len(pages) >= 2
    assert all(len(got) >= 4 for got in pages[:-1])
    assert all(t["message_payload"]["n"] == t["data"]["n"] for got in pages for t in got)
    # newest first, each once
    assert [t["data"]["n"] for got in pages for t in got] == list(range(COUNT - 1, -1, -1))


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


def _of_message(client: httpx.AsyncClient, pid: str, tx: str
                ) -> Callable[[int], Awaitable[dict[str, Any]]]:
    async def fetch(offset: int) -> dict[str, Any]:
        return await _get(client, f"/api/v1/traces/{pid}/{tx}", offset=offset)
    return fetch


async def test_a_message_s_traces_page_within_the_budget_and_next_offset_lists_the_rest(
        client: httpx.AsyncClient, queue_name: str) -> None:
    pid = await _message(client, queue_name, 0, 100)
    for n in range(COUNT):  # 100 to 300 kB of data each
        await _trace(client, pid, 0, n, SIZE * (1 + n % 3), [])
    pages = await _walk(_of_message(client, pid, "m0"), COUNT)
    assert len(pages) >= 4
    assert all(len(got) >= 3 for got in pages[:-1])  # a page holds what fits
    # oldest first, each once
    assert [t["data"]["n"] for got in pages for t in got] == list(range(COUNT))


async def test_a_message_s_trace_larger_than_the_budget_is_listed_alone(
        client: httpx.AsyncClient, queue_name: str) -> None:
    pid = await _message(client, queue_name, 0, 100)
    for n in range(3):
        await _trace(client, pid, 0, n, BUDGET * 3 // 2, [])
    fetch = _of_message(client, pid, "m0")
    for n in range(3):
        page = await fetch(n)
        assert [t["data"]["n"] for t in page["traces"]] == [n]
        assert page["truncated"] is (n < 2) and page["nextOffset"] == n + 1


async def test_a_message_s_traces_past_a_full_page_follow_from_next_offset(
        client: httpx.AsyncClient, queue_name: str) -> None:
    # The client gives no limit: a page of 1000 (the most one holds) with more after it is
    # truncated too.
    pid = await _message(client, queue_name, 0, 100)
    for first in range(0, 1003, 59):
        await asyncio.gather(*(_trace(client, pid, 0, n, 10, [])
                               for n in range(first, min(first + 59, 1003))))
    fetch = _of_message(client, pid, "m0")
    page = await fetch(0)
    assert len(page["traces"]) == 1000 and page["truncated"] is True
    rest = await fetch(page["nextOffset"])
    assert len(rest["traces"]) == 3 and rest["truncated"] is False
    assert rest["nextOffset"] == 1003
    ns = {t["data"]["n"] for t in page["traces"] + rest["traces"]}
    assert ns == set(range(1003))


async def test_a_message_s_traces_offset_is_checked(
        client: httpx.AsyncClient, queue_name: str) -> None:
    pid = await _message(client, queue_name, 0, 100)
    await _trace(client, pid, 0, 0, 10, [])
    for bad in ("-1", str(2**62 + 1), "x"):
        r = await client.get(f"/api/v1/traces/{pid}/m0", params={"offset": bad})
        assert r.status_code == 400, (bad, r.text)
    assert await _get(client, f"/api/v1/traces/{pid}/m0", offset=5) == {
        "traces": [], "truncated": False, "nextOffset": 5}
    # Not one of our partition ids: no trace, wherever the page starts.
    assert await _get(client, "/api/v1/traces/not-a-pid/m0", offset=7) == {
        "traces": [], "truncated": False, "nextOffset": 7}
