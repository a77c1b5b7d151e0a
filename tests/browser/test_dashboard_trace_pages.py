"""The traces view's pagers over pages of traces the broker cut at its byte budget
(`QUEEN_LIST_MAX_BYTES`): by name, "next" starts right after the traces shown (before, it
moved on by a whole page and skipped the traces the cut page left out); of one message,
"next" goes on at the answer's `nextOffset` (before, that view had no pager)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.browser.conftest import walk_pages
from tests.support import ANSWER_BUDGET, BrokerProcess

playwright_api = pytest.importorskip(
    "playwright.async_api",
    reason="browser tests need the playwright package (pip install -e '.[test]')")
expect = playwright_api.expect

BUDGET = ANSWER_BUDGET
SIZE = 300_000  # three traces a page under the budget


@pytest.fixture
def http(budget_client: httpx.AsyncClient) -> httpx.AsyncClient:
    return budget_client  # the session's broker with 1 MiB budgets (tests/conftest.py)


async def _traces(http: httpx.AsyncClient, queue: str, name: str, count: int) -> None:
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "transactionId": f"t-{i}", "payload": i} for i in range(count)]})
    assert r.status_code == 201, r.text
    for i, pushed in enumerate(r.json()):
        t = await http.post("/api/v1/traces", json={
            "transactionId": f"t-{i}", "partitionId": pushed["partition_id"],
            "traceNames": [name], "data": {"b": "x" * SIZE}})
        assert t.status_code == 201, t.text


async def test_next_page_starts_after_the_traces_a_cut_page_shows(
        browser: Any, budget_broker: BrokerProcess, http: httpx.AsyncClient) -> None:
    queue = "tracepages-" + uuid.uuid4().hex[:8]
    name = "pages-" + uuid.uuid4().hex[:8]
    await _traces(http, queue, name, 7)
    first = (await http.get(f"/api/v1/traces/by-name/{name}", params={"limit": 25})).json()
    assert first["truncated"] and 0 < len(first["traces"]) < 7, first
    page = await browser.new_page()
    try:
        seen = await walk_pages(page, f"{budget_broker.url}/#/traces?name={name}", 7)
        assert sorted(seen) == [f"t-{i}" for i in range(7)], seen
    finally:
        await page.close()


async def test_next_goes_on_to_the_traces_of_a_message_a_cut_page_leaves_out(
        browser: Any, budget_broker: BrokerProcess, http: httpx.AsyncClient) -> None:
    queue = "tracepages-" + uuid.uuid4().hex[:8]
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "transactionId": "t-0", "payload": 0}]})
    assert r.status_code == 201, r.text
    pid = r.json()[0]["partition_id"]
    for i in range(7):  # told apart by their event type, oldest first
        t = await http.post("/api/v1/traces", json={
            "transactionId": "t-0", "partitionId": pid, "eventType": f"e-{i}",
            "data": {"b": "x" * SIZE}})
        assert t.status_code == 201, t.text
    first = (await http.get(f"/api/v1/traces/{pid}/t-0")).json()
    assert first["truncated"] and 0 < len(first["traces"]) < 7, first
    page = await browser.new_page()
    try:
        seen = await walk_pages(page, f"{budget_broker.url}/#/traces?pid={pid}&tx=t-0", 7,
                                field="event")
        assert seen == [f"e-{i}" for i in range(7)], seen
    finally:
        await page.close()
