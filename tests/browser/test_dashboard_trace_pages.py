"""The traces view's pager over pages of traces by name the broker cut at its byte budget
(`QUEEN_LIST_MAX_BYTES`): "next" starts right after the traces shown. Before, it moved on by
a whole page and skipped the traces the cut page left out."""

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
SIZE = 300_000  # three traces a page under the budget


@pytest.fixture(scope="module")
def budget_broker(database_url: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(database_url, workers=1,
                       env={"QUEEN_LIST_MAX_BYTES": str(BUDGET)}) as proc:
        yield proc


@pytest.fixture
async def http(budget_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=budget_broker.url, timeout=60) as client:
        yield client


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
        seen: list[str] = []
        await page.goto(f"{budget_broker.url}/#/traces?name={name}")
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
        assert sorted(seen) == [f"t-{i}" for i in range(7)], seen
    finally:
        await page.close()
