"""The dead-letter view's pager over pages the broker cut at its byte budget
(`QUEEN_LIST_MAX_BYTES`): "next" starts right after the rows shown. Before, it moved on by a
whole page (25 rows) and skipped the dead letters the cut page left out."""

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
SIZE = 300_000  # three dead letters a page under the budget


@pytest.fixture
def http(budget_client: httpx.AsyncClient) -> httpx.AsyncClient:
    return budget_client  # the session's broker with 1 MiB budgets (tests/conftest.py)


async def _dead_letters(http: httpx.AsyncClient, queue: str, count: int) -> None:
    r = await http.post("/api/v1/configure", json={"queue": queue, "options": {"retryLimit": 0}})
    assert r.status_code == 200, r.text
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "transactionId": f"d-{i}", "payload": {"b": "x" * SIZE}}
        for i in range(count)]})
    assert r.status_code == 201, r.text
    for _ in range(count):
        r = await http.get(f"/api/v1/pop/queue/{queue}", params={"batch": 1,
                                                                 "consumerGroup": "g"})
        (m,) = r.json()["messages"]
        r = await http.post("/api/v1/ack", json={
            "transactionId": m["transactionId"], "partitionId": m["partitionId"],
            "status": "failed", "error": "no", "consumerGroup": "g", "leaseId": m["leaseId"]})
        assert r.json()[0]["success"], r.text


async def test_next_page_starts_after_the_rows_a_cut_page_shows(
        browser: Any, budget_broker: BrokerProcess, http: httpx.AsyncClient) -> None:
    queue = "dlqpages-" + uuid.uuid4().hex[:8]
    await _dead_letters(http, queue, 7)
    first = (await http.get("/api/v1/dlq", params={"queue": queue, "limit": 25})).json()
    assert first["truncated"] and 0 < len(first["messages"]) < 7, first
    page = await browser.new_page()
    try:
        seen = await walk_pages(page, f"{budget_broker.url}/#/dlq?queue={queue}", 7)
        assert sorted(seen) == [f"d-{i}" for i in range(7)], seen
    finally:
        await page.close()
