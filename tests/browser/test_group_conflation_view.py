"""The dashboard shows a consumer group's stored conflation policy (extensions §20.2): a
column of the group list and a line per queue on the group's page."""

from __future__ import annotations

import uuid

import httpx

from tests.browser.test_dashboard import Page, expect, open_view, page, row
from tests.browser.test_streams_view import api
from tests.support import BrokerProcess

__all__ = ["api", "page"]  # the fixtures, shared with test_dashboard and test_streams_view


async def test_group_list_and_page_show_the_conflation_flag(
        page: Page, broker: BrokerProcess, api: httpx.AsyncClient) -> None:
    queue = "dash-conf-" + uuid.uuid4().hex[:8]
    latest, plain = f"{queue}-latest", f"{queue}-plain"
    r = await api.post("/api/v1/push", json={"items": [{"queue": queue, "payload": {"n": 1}}]})
    assert r.status_code == 201
    for group, declared in ((latest, "true"), (plain, "false")):
        r = await api.get(f"/api/v1/pop/queue/{queue}", params={
            "wait": "false", "consumerGroup": group, "conflation": declared})
        assert r.status_code == 200, r.text
    await open_view(page, broker.url, f"groups?search={queue}")
    await expect(row(page, f"{latest}/{queue}").locator("[data-field='conflation']")
                 ).to_have_text("on")
    await expect(row(page, f"{plain}/{queue}").locator("[data-field='conflation']")
                 ).to_have_text("off")
    await open_view(page, broker.url, f"group/{latest}")
    section = page.locator(f"section[data-queue='{queue}']")
    await expect(section.locator("[data-conflation]")).to_have_attribute(
        "data-conflation", "on")
    await open_view(page, broker.url, f"group/{plain}")
    section = page.locator(f"section[data-queue='{queue}']")
    await expect(section.locator("[data-conflation]")).to_have_attribute(
        "data-conflation", "off")
