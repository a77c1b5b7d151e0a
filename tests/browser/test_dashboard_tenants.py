"""The dashboard and tenants in a real browser (headless Debian chromium via Playwright): an
operator picks a tenant and the page shows that tenant's queues only (the same queue name in
two tenants is two queues); a token bound to a tenant sees its own queues, is offered no
picker, and the label names its tenant."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.support import BrokerProcess
from tests.tokens import AUTH_SECRET, Signer

playwright_api = pytest.importorskip(
    "playwright.async_api",
    reason="browser tests need the playwright package (pip install -e '.[test]')")
expect = playwright_api.expect
# The dashboard module's tab (no script error allowed on it) and its view loader.
from tests.browser.test_dashboard import Page, open_view, page  # noqa: F401

HEADER = "x-queen-tenant"


async def push(api: httpx.AsyncClient, queue: str, n: int, tenant: str = "",
               **headers: str) -> None:
    if tenant:
        headers[HEADER] = tenant
    r = await api.post("/api/v1/push", headers=headers, json={"items": [
        {"queue": queue, "payload": {"i": i}} for i in range(n)]})
    assert r.status_code == 201, r.text


async def test_an_operator_picks_a_tenant_and_sees_its_queues_only(
        page: Page, broker: BrokerProcess) -> None:  # noqa: F811
    expect.set_options(timeout=15_000)
    prefix = "dten-" + uuid.uuid4().hex[:8]
    tenant = f"{prefix}-acme"
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as api:
        await push(api, f"{prefix}-shared", 2)
        await push(api, f"{prefix}-mine", 1)
        await push(api, f"{prefix}-shared", 5, tenant)
        await push(api, f"{prefix}-theirs", 1, tenant)

    await open_view(page, broker.url, f"queues?search={prefix}")
    names = page.locator("td[data-field='name']")
    await expect(names).to_have_text([f"{prefix}-mine", f"{prefix}-shared"])
    picker = page.locator("select#tenant")
    await expect(picker).to_be_visible()
    await expect(picker.locator(f"option[value='{tenant}']")).to_have_count(1)
    await picker.select_option(tenant)
    await expect(names).to_have_text([f"{prefix}-shared", f"{prefix}-theirs"])
    # The choice holds for the tab: a reload shows the same tenant.
    await open_view(page, broker.url, f"queues?search={prefix}")
    await expect(names).to_have_text([f"{prefix}-shared", f"{prefix}-theirs"])
    await expect(picker).to_have_value(tenant)
    # The tenant's queue of the shared name is its own: its detail shows its five messages.
    await open_view(page, broker.url, f"queue/{prefix}-shared")
    await expect(page.locator("tr[data-key='Default'] [data-field='lastOffset']")).to_have_text(
        "4")
    assert await page.evaluate("() => sessionStorage.getItem('queen.dashboard.tenant')") == tenant
    await picker.select_option("")
    await open_view(page, broker.url, f"queues?search={prefix}")
    await expect(names).to_have_text([f"{prefix}-mine", f"{prefix}-shared"])


async def test_a_token_bound_to_a_tenant_sees_its_own_queues_and_no_picker(
        browser: Any, auth_broker: BrokerProcess) -> None:
    expect.set_options(timeout=15_000)
    signer = Signer(AUTH_SECRET, "HS256")
    prefix = "dtok-" + uuid.uuid4().hex[:8]
    tenant = f"{prefix}-acme"
    admin = {"Authorization": f"Bearer {signer.token('ops', role='admin')}"}
    async with httpx.AsyncClient(base_url=auth_broker.url, timeout=30) as api:
        await push(api, f"{prefix}-shared", 1, **admin)
        await push(api, f"{prefix}-mine", 1, **admin)
        await push(api, f"{prefix}-shared", 1, tenant, **admin)
    context = await browser.new_context(viewport={"width": 1280, "height": 860})
    tab = await context.new_page()
    try:
        await tab.goto(f"{auth_broker.url}/#/queues?search={prefix}")
        await tab.fill("#token-input", signer.token("acme-user", role="read-only",
                                                    tenant=tenant))
        await tab.click("#token-form button[type='submit']")
        await expect(tab.locator("#who")).to_contain_text(
            f"acme-user · read-only · tenant {tenant}")
        await expect(tab.locator("td[data-field='name']")).to_have_text([f"{prefix}-shared"])
        await expect(tab.locator("select#tenant")).to_be_hidden()
        # An admin token bound to no tenant is an operator: the picker is offered.
        await tab.click("[data-action='forget-token']")
        await tab.fill("#token-input", signer.token("ops", role="admin"))
        await tab.click("#token-form button[type='submit']")
        await expect(tab.locator("td[data-field='name']")).to_have_text(
            [f"{prefix}-mine", f"{prefix}-shared"])
        await expect(tab.locator("select#tenant")).to_be_visible()
    finally:
        await context.close()
