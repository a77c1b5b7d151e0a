"""The dead-letter view's pager over pages the broker cut at its byte budget
(`QUEEN_LIST_MAX_BYTES`): "next" starts right after the rows shown. Before, it moved on by a
whole page (25 rows) and skipped the dead letters the cut page left out."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.support import BrokerProcess

playwright_api = pytest.importorskip(
    "playwright.async_api",
    reason="browser tests need the playwright package (pip install -e '.[test]')")
expect = playwright_api.expect

BUDGET = 1024 * 1024
SIZE = 300_000  # three dead letters a page under the budget


@pytest.fixture(scope="module")
def budget_broker(database_url: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(database_url, workers=1,
                       env={"QUEEN_LIST_MAX_BYTES": str(BUDGET)}) as proc:
        yield proc


@pytest.fixture
async def http(budget_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=budget_broker.url, timeout=60) as client:
        yield client


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
        seen: list[str] = []
        await page.goto(f"{budget_broker.url}/#/dlq?queue={queue}")
        for _ in range(7):
            await page.wait_for_selector("#view[data-loads]:not([data-loads='0'])")
            rows = page.locator("tr[data-key] [data-field='transactionId']")
            await expect(rows.first).to_be_visible()
            seen += await rows.all_inner_texts()
            following = page.locator("[data-page='next']")
            if await following.is_disabled():
                break
            loads = await page.locator("#view").get_attribute("data-loads")
            await following.click()
            await page.wait_for_selector(f"#view:not([data-loads='{loads}'])")
        assert sorted(seen) == [f"d-{i}" for i in range(7)], seen
    finally:
        await page.close()
