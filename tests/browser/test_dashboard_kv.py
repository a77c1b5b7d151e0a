"""The dashboard's KV view in a real browser (headless Debian chromium via Playwright): the
namespaces the API lists, with their keys, bytes and keys expiring soon, paged with the
API's cursor."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.support import BrokerProcess

playwright_api = pytest.importorskip(
    "playwright.async_api",
    reason="browser tests need the playwright package (pip install -e '.[test]')")
expect = playwright_api.expect
# The dashboard module's tab (no script error allowed on it) and its view loader.
from tests.browser.test_dashboard import Page, open_view, page  # noqa: F401


async def test_kv_namespaces_show_what_the_api_answers_and_page_by_cursor(
        page: Page, broker: BrokerProcess) -> None:  # noqa: F811
    expect.set_options(timeout=15_000)
    prefix = "dkv-" + uuid.uuid4().hex[:8]
    names = [f"{prefix}-{i:02d}" for i in range(51)]
    ops: list[dict[str, object]] = []
    for i, ns in enumerate(names):
        ops.append({"op": "put", "ns": ns, "key": "a", "value": "x" * i, "forever": True})
        if i % 2:
            ops.append({"op": "put", "ns": ns, "key": "b", "value": i, "ttlSeconds": 60})
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as api:
        assert (await api.post("/api/v1/kv", json=ops)).status_code == 200
        listed = (await api.get("/api/v1/resources/kv-namespaces",
                                params={"after": prefix, "limit": 50})).json()
    assert [r["ns"] for r in listed["rows"]] == names[:50]
    assert listed["truncated"] is True and listed["nextAfter"] == names[49]
    assert (listed["rows"][3]["keys"], listed["rows"][3]["bytes"],
            listed["rows"][3]["expiringSoon"]) == (2, 5 + 1, 1)

    await open_view(page, broker.url, f"kv?after={prefix}")
    await expect(page.locator("td[data-field='ns']")).to_have_text(names[:50])
    for r in listed["rows"][:5]:
        line = page.locator(f"tr[data-key='{r['ns']}']")
        await expect(line.locator("[data-field='keys']")).to_have_text(f"{r['keys']:,}")
        await expect(line.locator("[data-field='bytes']")).to_have_text(f"{r['bytes']:,}")
        await expect(line.locator("[data-field='expiring']")).to_have_text(
            f"{r['expiringSoon']:,}")
    await page.click("button[data-page='next']")
    await expect(page.locator("td[data-field='ns']").first).to_have_text(names[50])
    await expect(page.locator("a[data-nav='kv']")).to_have_class("active")
