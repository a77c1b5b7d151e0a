"""The dashboard's timers view in a real browser (headless Debian chromium): the queues with
pending timers (count, next due, failing) and one queue's timers by key, paged with the
API's keyset (`after`/`nextAfter`), showing attempts and the last error."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from tests.browser import test_dashboard
from tests.support import BrokerProcess

playwright_api = pytest.importorskip(
    "playwright.async_api",
    reason="browser tests need the playwright package (pip install -e '.[test]')")
expect = playwright_api.expect
expect.set_options(timeout=15_000)
page = test_dashboard.page  # the fixture: a fresh tab that fails the test on a script error
open_view = test_dashboard.open_view


async def test_timers_view_lists_queues_then_a_queues_timers_page_by_page(
        page: Any, broker: BrokerProcess, db: asyncpg.Connection) -> None:
    prefix = "dash-" + uuid.uuid4().hex[:8]
    queue = f"{prefix}-timers"
    keys = [f"order/{i:02d}" for i in range(30)]
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
        r = await http.post("/api/v1/timers", json=[
            {"op": "schedule", "queue": queue, "timerKey": k, "txn": f"tx-{k}",
             "delayMs": 3_600_000 + i, "payload": "e30="} for i, k in enumerate(keys)])
        assert r.status_code == 200, r.text
        listed = (await http.get(f"/api/v1/timers/{queue}", params={"limit": 25})).json()
    # A timer that failed twice (what a fire of an undecodable payload records).
    await db.execute("UPDATE queen.timers SET attempts = 2, last_error = 'payload is not one "
                     "JSON document' WHERE queue = $1 AND timer_key = 'order/03'", queue)

    await open_view(page, broker.url, f"timers?after={prefix}")
    mine = page.locator(f"tr[data-key='{queue}']")
    await expect(mine.locator("td[data-field='pending']")).to_have_text("30")
    await expect(mine.locator("td[data-field='failing']")).to_have_text("1")
    await mine.locator("td[data-field='queue'] a").click()

    rows = page.locator("tbody tr")
    await expect(rows).to_have_count(25)
    await expect(rows.first.locator("td[data-field='timerKey']")).to_have_text("order/00")
    failing = page.locator("tr[data-key='order/03']")
    await expect(failing.locator("td[data-field='attempts']")).to_have_text("2")
    await expect(failing.locator("td[data-field='lastError']")).to_have_text(
        "payload is not one JSON document")
    assert listed["nextAfter"] == "order/24"
    await page.click("button[data-page='next']")
    await expect(rows).to_have_count(5)
    await expect(rows.first.locator("td[data-field='timerKey']")).to_have_text("order/25")
    await expect(page.locator("button[data-page='next']")).to_be_disabled()
    await page.click("button[data-page='first']")
    await expect(rows).to_have_count(25)
