"""The dashboard's queue list shows ephemeral queues with the listing's depth, bytes and drop
counters (`GET /api/v1/ephemeral/queues`)."""

from __future__ import annotations

import uuid

import httpx

# test_dashboard skips the module when playwright is missing, and sets expect's timeout
from tests.browser.test_dashboard import Page, api, expect, open_view, page, row, text_of
from tests.support import BrokerProcess

__all__ = ["api", "page"]  # fixtures, used by name
EPH = "/api/v1/ephemeral"


async def test_queue_list_shows_ephemeral_queues_with_depth_bytes_and_drops(
        page: Page, broker: BrokerProcess, api: httpx.AsyncClient) -> None:
    prefix = "dash-eph-" + uuid.uuid4().hex[:6]
    feed, inbox = f"{prefix}-feed", f"{prefix}-inbox"
    r = await api.post(EPH + "/configure", json={"queue": feed, "options": {
        "maxLength": 2, "policy": "dropOldest"}})
    assert r.status_code == 201
    for n in range(5):  # three evicted
        assert (await api.post(EPH + "/push", json={
            "queue": feed, "messages": [{"payload": {"n": n}}]})).status_code == 201
    await api.post(EPH + "/push", json={"queue": inbox, "messages": [{"payload": "hi"}]})
    await open_view(page, broker.url, f"queues?search={prefix}")
    listed = {q["queue"]: q for q in (await api.get(EPH + "/queues")).json()["queues"]}
    assert listed[feed]["drops"]["bounds"] == 3
    for name in (feed, inbox):
        cells = row(page, name)
        q = listed[name]
        await expect(cells.locator("[data-field='ephTier']")).to_have_text(q["tier"])
        await expect(cells.locator("[data-field='ephDepth']")).to_have_text(text_of(q["depth"]))
        await expect(cells.locator("[data-field='ephBytes']")).to_have_text(text_of(q["bytes"]))
        await expect(cells.locator("[data-field='ephDropsBounds']")).to_have_text(
            text_of(q["drops"]["bounds"]))
    await expect(row(page, feed).locator("[data-field='ephDepth']")).to_have_text("2")
