"""The dashboard's streams view: each query with its source and sink, and per source
partition the state it keeps and its last cycle, as `GET /streams/v1/queries` answers."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.browser.test_dashboard import Page, expect, open_view, page
from tests.support import BrokerProcess

__all__ = ["page"]  # the fixture, shared with test_dashboard


@pytest.fixture
async def api(broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as client:
        yield client


async def test_streams_view_lists_queries_state_and_last_cycle(
        page: Page, broker: BrokerProcess, api: httpx.AsyncClient) -> None:
    name = "dash-stream-" + uuid.uuid4().hex[:8]
    r = await api.post("/api/v1/push", json={"items": [
        {"queue": name, "partition": p, "payload": {"n": 1}} for p in ("p1", "p2")]})
    assert r.status_code == 201
    reg = (await api.post("/streams/v1/queries", json={
        "name": name, "source_queue": name, "sink_queue": name + "-out",
        "config_hash": "abc"})).json()
    pops: dict[str, Any] = (await api.get(f"/api/v1/pop/queue/{name}", params={
        "batch": "10", "wait": "false", "partitions": "2",
        "consumerGroup": f"streams.{name}"})).json()
    for k, m in enumerate(pops["messages"]):
        ops = [{"type": "upsert", "key": f"k{i}", "value": {"v": "x" * 100}}
               for i in range(k + 1)]
        r = await api.post("/streams/v1/cycle", json={
            "query_id": reg["query_id"], "partition_id": m["partitionId"],
            "consumer_group": f"streams.{name}", "state_ops": ops, "ack": None})
        assert r.json()["success"] is True
    listed = next(q for q in (await api.get("/streams/v1/queries")).json()["queries"]
                  if q["name"] == name)
    await open_view(page, broker.url, "streams")
    heading = page.get_by_role("heading", name=f"Query {name}")
    await expect(heading).to_be_visible()
    # Other tests' queries are listed too: look inside this query's section only.
    mine = page.locator("section", has=heading)
    await expect(mine.locator("[data-field='sink']")).to_have_text(name + "-out")
    await expect(mine.locator("[data-field='totalKeys']")).to_have_text("3")
    for p in listed["partitions"]:
        line = mine.locator(f"tr[data-key='{p['partitionId']}']")
        await expect(line.locator("[data-field='stateKeys']")).to_have_text(str(p["stateKeys"]))
        await expect(line.locator("[data-field='cycles']")).to_have_text("1")
        await expect(line.locator("[data-field='partition']")).to_have_text(p["partition"])
