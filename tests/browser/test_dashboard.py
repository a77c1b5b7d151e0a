"""The dashboard in a real browser (headless Debian chromium via Playwright) against the
session's broker with data: every view loads and shows what the JSON API answers, and a
seek, a DLQ replay, a DLQ delete and a group delete clicked on the page change what the API
then answers. One browser for the module; data under one unique prefix.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import re
import tomllib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatch
from typing import Any
from urllib.parse import urlencode

import asyncpg
import httpx
import pytest

from tests.browser.conftest import snap
from tests.support import ROOT, BrokerProcess, wait_for
from tests.tokens import AUTH_SECRET, Signer

playwright_api = pytest.importorskip(
    "playwright.async_api",
    reason="browser tests need the playwright package (pip install -e '.[test]')")
expect = playwright_api.expect
expect.set_options(timeout=15_000)
Page = Any  # playwright.async_api.Page
GROUPS = "/api/v1/consumer-groups"


class Data:
    """What the module pushed: queue names, partitions and groups, all under one prefix."""

    def __init__(self) -> None:
        self.prefix = "dash-" + uuid.uuid4().hex[:8]
        self.orders = f"{self.prefix}-orders"  # partitions p1 (30 messages), p2 (10)
        self.pay = f"{self.prefix}-pay"  # 6 messages; 3 dead-lettered by group `audit`
        self.extra = [f"{self.prefix}-x{i}" for i in range(3)]
        # Trace names: every billed order, the first three, a tenant (a name with a `/`:
        # orders 0 and 1, order 0 twice), and the failed payments.
        self.checkout = f"{self.prefix}-checkout"
        self.vip = f"{self.prefix}-vip"
        self.tenant = f"{self.prefix}/tenant-a"
        self.declined = f"{self.prefix}-declined"


async def push(http: httpx.AsyncClient, items: list[dict[str, Any]]) -> None:
    r = await http.post("/api/v1/push", json={"items": items})
    assert r.status_code == 201 and all(i["status"] == "queued" for i in r.json()), r.text


async def consume(http: httpx.AsyncClient, queue: str, group: str, n: int, *,
                  partition: str | None = None,
                  status: str = "completed") -> list[dict[str, Any]]:
    """Pop n messages as `group` and ack each with `status`, one at a time."""
    path = f"/api/v1/pop/queue/{queue}" + (f"/partition/{partition}" if partition else "")
    popped = []
    for _ in range(n):
        r = await http.get(path, params={"batch": 1, "consumerGroup": group})
        assert r.status_code == 200, r.text
        (m,) = r.json()["messages"]
        r = await http.post("/api/v1/ack", json={
            "transactionId": m["transactionId"], "partitionId": m["partitionId"],
            "status": status, "error": "amount out of range", "consumerGroup": group,
            "leaseId": m["leaseId"]})
        assert r.json()[0]["success"], r.text
        popped.append(m)
    return popped


async def trace(http: httpx.AsyncClient, message: dict[str, Any], group: str, event: str,
                names: list[str], data: Any) -> None:
    r = await http.post("/api/v1/traces", json={
        "transactionId": message["transactionId"], "partitionId": message["partitionId"],
        "consumerGroup": group, "eventType": event, "traceNames": names, "data": data})
    assert r.status_code == 201, r.text


async def sample(http: httpx.AsyncClient) -> None:
    """Take an analytics sample now (the session broker runs no reaper)."""
    r = await http.post("/api/v1/stats/refresh")
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
async def data(broker: BrokerProcess) -> AsyncIterator[Data]:
    d = Data()
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
        for queue in (d.orders, d.pay):
            r = await http.post("/api/v1/configure", json={
                "queue": queue, "options": {"retryLimit": 0, "leaseTime": 30}})
            assert r.status_code == 200, r.text
        await sample(http)  # analytics count from here: the pushes below land in buckets
        await push(http, [{"queue": d.orders, "partition": p, "transactionId": f"o-{p}-{i}",
                           "payload": {"order": i, "partition": p, "lines": [1, 2]}}
                          for p, n in (("p1", 30), ("p2", 10)) for i in range(n)])
        await push(http, [{"queue": d.pay, "transactionId": f"pay-{i}",
                           "payload": {"amount": i * 10}} for i in range(6)])
        await push(http, [{"queue": q, "payload": i} for i, q in enumerate(d.extra)])
        await sample(http)
        billed = await consume(http, d.orders, "billing", 10, partition="p1")
        declined = await consume(http, d.pay, "audit", 3, status="failed")  # DLQ at once
        for i, m in enumerate(billed):
            names = [d.checkout] + [d.vip] * (i < 3) + [d.tenant] * (i < 2)
            await trace(http, m, "billing", "reserved", names, {"order": i, "step": 1})
        await trace(http, billed[0], "billing", "shipped", [d.tenant], {"carrier": "post"})
        for m in declined:
            await trace(http, m, "audit", "declined", [d.declined], "amount out of range")
        await sample(http)
    yield d


@pytest.fixture(scope="module")
async def api(broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as client:
        yield client


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 860})
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    yield tab
    await context.close()
    assert not errors, errors  # no script error on any view


async def open_view(page: Page, base: str, route: str) -> None:
    """Load the page at `#/route` and wait for the view's first load to finish."""
    await page.goto(f"{base}/#/{route}")
    await page.wait_for_selector("#view[data-loads]:not([data-loads='0'])")


def text_of(n: int) -> str:
    return f"{n:,}"


def row(page: Page, key: str) -> Any:
    return page.locator(f"tr[data-key='{key}']")


async def confirm(page: Page) -> None:
    await expect(page.locator("dialog#confirm")).to_be_visible()
    await page.click("#confirm-ok")


async def cancel(page: Page) -> None:
    await expect(page.locator("dialog#confirm")).to_be_visible()
    await page.click("#confirm-cancel")
    await expect(page.locator("dialog#confirm")).to_be_hidden()


# --- the page itself ------------------------------------------------------------------------

async def test_the_page_is_one_document_with_nothing_from_elsewhere(api: httpx.AsyncClient) -> None:
    r = await api.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    # The SVG namespace is a name, not something fetched.
    page = r.text.replace('"http://www.w3.org/2000/svg"', "")
    for marker in ("http://", "https://", "<script src", "<link rel=\"stylesheet\"", "@import"):
        assert marker not in page, marker
    # The policy allows exactly the inlined script and style, by hash, and this origin.
    policy = r.headers["content-security-policy"]
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    (script,) = re.findall(r"<script>(.*?)</script>", r.text, re.DOTALL)
    (style,) = re.findall(r"<style>(.*?)</style>", r.text, re.DOTALL)
    for text, directive in ((script, "script-src"), (style, "style-src")):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"{directive} 'sha256-{digest}'" in policy


def test_every_dashboard_file_ships_in_the_package() -> None:
    """pyproject's package-data globs cover every file the page is assembled from, so a
    wheel (not only an editable install) serves the dashboard."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["broker.dashboard"]
    static = ROOT / "broker" / "dashboard" / "static"
    files = [p.relative_to(static.parent).as_posix() for p in static.iterdir()]
    assert files and all(any(fnmatch(f, g) for g in globs) for f in files), files


# --- views against the API ------------------------------------------------------------------

async def test_overview_shows_what_the_api_answers(page: Page, broker: BrokerProcess,
                                                   api: httpx.AsyncClient, data: Data) -> None:
    await open_view(page, broker.url, "")
    overview = (await api.get("/api/v1/resources/overview")).json()
    field = lambda name: page.locator(f"dd[data-field='{name}']")
    await expect(field("queues")).to_have_text(text_of(overview["queues"]))
    await expect(field("partitions")).to_have_text(text_of(overview["partitions"]))
    await expect(field("messages")).to_have_text(text_of(overview["messages"]["total"]))
    await expect(field("deadLetters")).to_have_text(text_of(overview["deadLetters"]))
    await expect(field("consumerGroups")).to_have_text(text_of(overview["consumerGroups"]))
    await expect(field("database")).to_have_text("connected")
    await expect(page.locator("#who")).to_contain_text("auth off")
    await snap(page, "overview")


async def test_queues_are_searched_and_paged_by_the_broker(page: Page, broker: BrokerProcess,
                                                           api: httpx.AsyncClient,
                                                           data: Data) -> None:
    async def api_names(search: str, limit: int, offset: int) -> list[str]:
        r = await api.get("/api/v1/resources/queues",
                          params={"search": search, "limit": limit, "offset": offset})
        return [q["name"] for q in r.json()["queues"]]

    await open_view(page, broker.url, f"queues?search={data.prefix}&limit=2")
    names = page.locator("td[data-field='name']")
    await expect(names).to_have_text(await api_names(data.prefix, 2, 0))
    await expect(page.locator("[data-field='range']")).to_have_text("1–2 of 5")
    await page.click("button[data-page='next']")
    await expect(names).to_have_text(await api_names(data.prefix, 2, 2))
    await expect(page.locator("[data-field='range']")).to_have_text("3–4 of 5")
    # The search box: only the three extra queues match "-x".
    await page.fill("input[name='search']", f"{data.prefix}-x")
    await page.press("input[name='search']", "Enter")
    await expect(names).to_have_text(await api_names(f"{data.prefix}-x", 2, 0))
    await expect(page.locator("[data-field='range']")).to_have_text("1–2 of 3")
    await open_view(page, broker.url, f"queues?search={data.prefix}")
    await snap(page, "queues")


async def test_queue_detail_shows_options_partitions_and_group_lag(
        page: Page, broker: BrokerProcess, api: httpx.AsyncClient, data: Data) -> None:
    await open_view(page, broker.url, f"queue/{data.orders}")
    detail = (await api.get(f"/api/v1/resources/queues/{data.orders}")).json()
    await expect(row(page, "leaseTime").locator("[data-field='value']")).to_have_text(
        str(detail["options"]["leaseTime"]))
    await expect(row(page, "retryLimit").locator("[data-field='value']")).to_have_text("0")
    for part in detail["partitions"]:
        cells = row(page, part["name"]).first
        await expect(cells.locator("[data-field='lastOffset']")).to_have_text(
            text_of(part["lastOffset"]))
        await expect(cells.locator("[data-field='lastWrite']")).to_have_text(
            part["newestMessage"][:19].replace("T", " ") + "Z")
    # The group's lag per partition is the API's.
    group = (await api.get(f"{GROUPS}/billing")).json()[data.orders]["partitions"]
    (p1,) = [p for p in group if p["partition"] == "p1"]
    assert p1["offsetLag"] == 20  # 30 pushed, 10 acked
    block = page.locator("[data-group='billing']")
    await expect(block.locator("tr[data-key='p1'] [data-field='offsetLag']")).to_have_text("20")
    await expect(block.locator("tr[data-key='p1'] [data-field='committed']")).to_have_text("9")
    await snap(page, "queue")


async def test_messages_of_a_partition_by_offset_with_their_payload(
        page: Page, broker: BrokerProcess, api: httpx.AsyncClient, data: Data) -> None:
    await open_view(page, broker.url, f"messages/{data.orders}/p1?offset=5&limit=10")
    offsets = page.locator("td[data-field='offset']")
    await expect(offsets).to_have_text([str(n) for n in range(5, 15)])
    await expect(page.locator("td[data-field='transactionId']")).to_have_text(
        [f"o-p1-{n}" for n in range(5, 15)])
    await page.get_by_role("link", name="o-p1-7", exact=True).click()
    detail = page.locator("[data-detail='message']")
    await expect(detail.locator("pre[data-field='payload']")).to_be_visible()
    shown = json.loads(await detail.locator("pre[data-field='payload']").inner_text())
    assert shown == {"order": 7, "partition": "p1", "lines": [1, 2]}
    pid = (await api.get(f"/api/v1/resources/queues/{data.orders}")).json()["partitions"][0]["id"]
    message = (await api.get(f"/api/v1/messages/{pid}/o-p1-7")).json()
    await expect(detail.locator("dd[data-field='status']")).to_have_text(message["status"])
    await snap(page, "messages")
    # Paging: "newer" continues after the last shown offset.
    await page.click("button[data-page='next']")
    await expect(offsets.first).to_have_text("15")


async def test_consumer_groups_list_matches_the_api(page: Page, broker: BrokerProcess,
                                                    api: httpx.AsyncClient, data: Data) -> None:
    await open_view(page, broker.url, f"groups?search={data.prefix}")
    groups = [g for g in (await api.get(GROUPS)).json() if g["queueName"].startswith(data.prefix)]
    assert {(g["name"], g["queueName"]) for g in groups} == {
        ("billing", data.orders), ("audit", data.pay)}
    for g in groups:
        cells = row(page, f"{g['name']}/{g['queueName']}")
        await expect(cells.locator("[data-field='offsetLag']")).to_have_text(text_of(g["offsetLag"]))
        await expect(cells.locator("[data-field='state']")).to_have_text(g["state"])
    await snap(page, "groups")


# --- actions --------------------------------------------------------------------------------

async def group_lag(api: httpx.AsyncClient, group: str, queue: str) -> dict[str, int]:
    detail = (await api.get(f"{GROUPS}/{group}")).json()
    return {p["partition"]: p["offsetLag"] for p in detail.get(queue, {}).get("partitions", [])}


async def test_seek_to_end_is_confirmed_then_the_lag_is_gone(
        page: Page, broker: BrokerProcess, api: httpx.AsyncClient, data: Data) -> None:
    await consume(api, data.orders, "seeker", 2, partition="p2")
    # Lag counts every partition the group reads, p1 too, which it never popped.
    assert await group_lag(api, "seeker", data.orders) == {"p1": 30, "p2": 8}
    await open_view(page, broker.url, f"groups?search={data.prefix}")
    target = row(page, f"seeker/{data.orders}")
    await target.locator("[data-action='seek-end']").click()
    await cancel(page)
    assert await group_lag(api, "seeker", data.orders) == {"p1": 30, "p2": 8}  # cancelled
    await target.locator("[data-action='seek-end']").click()
    await confirm(page)
    await expect(page.locator("#notice")).to_contain_text("moved to the end")
    # The seek creates the group's missing cursor on p1 too: nothing left anywhere.
    assert await group_lag(api, "seeker", data.orders) == {"p1": 0, "p2": 0}
    await expect(target.locator("[data-field='offsetLag']")).to_have_text("0")


async def test_seek_to_a_time_moves_the_cursor_back(page: Page, broker: BrokerProcess,
                                                    api: httpx.AsyncClient, data: Data) -> None:
    await consume(api, data.orders, "rewinder", 4, partition="p2")
    assert await group_lag(api, "rewinder", data.orders) == {"p1": 30, "p2": 6}
    await open_view(page, broker.url, "group/rewinder")
    section = page.locator(f"section[data-queue='{data.orders}']")
    await section.locator("[data-action='seek-time']").click()
    # An hour before now, in the browser's local time (the input's own format).
    await expect(page.locator("#seek-time")).to_be_visible()
    before = await page.locator("#seek-time").input_value()
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    assert abs(await page.evaluate(f"() => new Date({before!r}).getTime()")
               - hour_ago.timestamp() * 1000) < 120_000
    await snap(page, "seek")
    await confirm(page)
    await expect(page.locator("#notice")).to_contain_text("partition(s) moved to")
    # Every message is younger than an hour: the group has everything to read again.
    assert await group_lag(api, "rewinder", data.orders) == {"p1": 30, "p2": 10}
    await expect(section.locator("tr[data-key='p2'] [data-field='offsetLag']")).to_have_text("10")


async def test_dead_letters_are_replayed_and_deleted_from_the_page(
        page: Page, broker: BrokerProcess, api: httpx.AsyncClient, data: Data) -> None:
    async def dlq() -> dict[str, Any]:
        r = await api.get("/api/v1/dlq", params={"queue": data.pay})
        return r.json()  # type: ignore[no-any-return]

    async def last_offset() -> int:
        r = await api.get(f"/api/v1/resources/queues/{data.pay}")
        return int(r.json()["partitions"][0]["lastOffset"])

    before = await dlq()
    assert before["total"] == 3
    rows = {m["transactionId"]: m for m in before["messages"]}
    await open_view(page, broker.url, f"dlq?queue={data.pay}")
    await expect(page.locator("[data-field='total']")).to_have_text("3")
    await expect(page.locator("td[data-field='transactionId']")).to_have_text(
        [m["transactionId"] for m in before["messages"]])
    # The payload view of one row.
    await page.get_by_role("link", name="pay-1", exact=True).click()
    shown = page.locator("[data-detail='dead-letter'] pre[data-field='payload']")
    await expect(shown).to_have_text('{\n  "amount": 10\n}')
    await snap(page, "dlq")

    # Replay pay-1 by its DLQ row id: the stored payload is pushed again as a new message,
    # the row is gone.
    posts: list[str] = []
    page.on("request", lambda q: posts.append(q.url) if q.method == "POST" else None)
    end = await last_offset()
    await row(page, rows["pay-1"]["id"]).locator("[data-action='replay']").click()
    await confirm(page)
    await expect(page.locator("#notice")).to_contain_text(
        re.compile(rf"^Replayed pay-1 as \S+ at offset {end + 1}\.$"))
    await expect(row(page, rows["pay-1"]["id"])).to_have_count(0)
    assert posts == [f"{broker.url}/api/v1/dlq/{rows['pay-1']['id']}/replay"]
    after = await dlq()
    assert after["total"] == 2 and "pay-1" not in {m["transactionId"] for m in after["messages"]}
    assert await last_offset() == end + 1
    r = await api.post("/api/v1/fetch", json={"entries": [
        {"queue": data.pay, "offset": end + 1}]})
    (record,) = r.json()["entries"][0]["records"]
    assert record["payload"] == {"amount": 10} and record["transactionId"] != "pay-1"
    assert record["transactionId"] in await page.locator("#notice").inner_text()

    # Delete pay-2: the row is gone, nothing is pushed.
    await row(page, rows["pay-2"]["id"]).locator("[data-action='delete-dead-letter']").click()
    await confirm(page)
    await expect(page.locator("#notice")).to_contain_text("pay-2 deleted")
    await expect(row(page, rows["pay-2"]["id"])).to_have_count(0)
    assert [m["transactionId"] for m in (await dlq())["messages"]] == ["pay-0"]
    assert await last_offset() == end + 1
    await expect(page.locator("[data-field='total']")).to_have_text("1")

    # The replayed message is the partition's newest, with the payload of pay-1.
    await open_view(page, broker.url, f"messages/{data.pay}/Default")
    newest = page.locator("tbody tr").last
    await expect(newest.locator("td[data-field='offset']")).to_have_text(text_of(end + 1))
    await expect(newest.locator("td[data-field='transactionId']")).to_have_text(
        record["transactionId"])
    await expect(newest.locator("td[data-field='payload']")).to_have_text('{"amount":10}')


async def test_deleting_a_group_asks_first(page: Page, broker: BrokerProcess,
                                           api: httpx.AsyncClient, data: Data) -> None:
    await consume(api, data.orders, "doomed", 1, partition="p2")

    async def listed() -> bool:
        return any(g["name"] == "doomed" and g["queueName"] == data.orders
                   for g in (await api.get(GROUPS)).json())

    assert await listed()
    await open_view(page, broker.url, f"groups?search={data.prefix}")
    target = row(page, f"doomed/{data.orders}")
    await target.locator("[data-action='delete-group']").click()
    await cancel(page)
    assert await listed()
    await target.locator("[data-action='delete-group']").click()
    await confirm(page)
    await expect(page.locator("#notice")).to_contain_text("Group doomed deleted")
    await expect(target).to_have_count(0)
    assert not await listed()


# --- traces and analytics --------------------------------------------------------------

async def test_traces_by_name_and_by_message_show_what_the_api_answers(
        page: Page, broker: BrokerProcess, api: httpx.AsyncClient, data: Data) -> None:
    # The names, searched by the broker: this module's four with their counts.
    r = await api.get("/api/v1/traces/names", params={"search": data.prefix, "limit": 25})
    names = {n["trace_name"]: n for n in r.json()["trace_names"]}
    assert {n: (v["trace_count"], v["message_count"]) for n, v in names.items()} == {
        data.checkout: (10, 10), data.vip: (3, 3), data.tenant: (3, 2), data.declined: (3, 3)}
    await open_view(page, broker.url, f"traces?search={data.prefix}")
    await expect(page.locator("td[data-field='name']")).to_have_text(
        [n["trace_name"] for n in r.json()["trace_names"]])
    for name, listed in names.items():
        await expect(row(page, name).locator("[data-field='count']")).to_have_text(
            text_of(listed["trace_count"]))

    # A name with a `/`, clicked: its traces, newest first, with their messages.
    await page.get_by_role("link", name=data.tenant, exact=True).click()
    by_name = (await api.get(f"/api/v1/traces/by-name/{data.tenant}")).json()
    assert [t["transaction_id"] for t in by_name["traces"]] == ["o-p1-0", "o-p1-1", "o-p1-0"]
    await expect(page.locator("[data-field='total']")).to_have_text("3")
    await expect(page.locator("td[data-field='transactionId']")).to_have_text(
        [t["transaction_id"] for t in by_name["traces"]])
    await expect(page.locator("td[data-field='event']")).to_have_text(
        [t["event_type"] for t in by_name["traces"]])
    await expect(page.locator("td[data-field='where']").first).to_have_text(f"{data.orders} / p1")
    await snap(page, "traces")

    # A message, clicked: its traces, oldest first, with their names and data.
    await page.get_by_role("link", name="o-p1-0", exact=True).first.click()
    pid = by_name["traces"][0]["partition_id"]
    of_message = (await api.get(f"/api/v1/traces/{pid}/o-p1-0")).json()["traces"]
    assert [t["event_type"] for t in of_message] == ["reserved", "shipped"]
    await expect(page.get_by_role("heading", name="Traces of message o-p1-0")).to_be_visible()
    await expect(page.locator("td[data-field='event']")).to_have_text(["reserved", "shipped"])
    await expect(page.locator("td[data-field='names']")).to_have_text(
        [", ".join(t["trace_names"]) for t in of_message])
    await expect(page.locator("td[data-field='data']")).to_have_text(
        ['{"order":0,"step":1}', '{"carrier":"post"}'])


async def settled_window(db: asyncpg.Connection) -> dict[str, str]:
    """The hour up to now, once every live process has flushed after its end: from then on
    the minute rows inside it no longer come and go (their counts still grow)."""
    end = datetime.now(UTC)

    async def flushed() -> bool:
        oldest = await db.fetchval(
            "SELECT min(seen_at) FROM queen.stats_processes"
            " WHERE seen_at > now() - interval '10 seconds'")
        return oldest is not None and oldest > end

    await wait_for(flushed, timeout=15, interval=0.1)
    return {"from": (end - timedelta(hours=1)).isoformat(), "to": end.isoformat()}


def analytics_route(window: dict[str, str], **params: str) -> str:
    return "analytics?" + urlencode({**params, **window})


async def test_analytics_charts_throughput_lag_dlq_and_latency_over_a_window(
        page: Page, broker: BrokerProcess, api: httpx.AsyncClient, data: Data,
        db: asyncpg.Connection) -> None:
    window = await settled_window(db)
    # One queue: its samples, per bucket (the fixture sampled before and after its traffic).
    r = await api.get("/api/v1/analytics/queue-ops", params={**window, "queue": data.orders})
    ops = r.json()["series"]
    buckets = sorted({p["bucket"] for p in ops})
    assert buckets and sum(p["pushMessages"] for p in ops) == 40, ops
    assert sum(p["popMessages"] for p in ops) == 10
    await open_view(page, broker.url, analytics_route(window, queue=data.orders))
    await expect(page.locator("[data-window]")).to_have_attribute("data-window", "custom")
    for chart in ("throughput", "lag", "depth", "dlq"):
        await expect(page.locator(f"svg[data-chart='{chart}']")).to_have_attribute(
            "data-points", str(len(buckets)))
    field = lambda name: page.locator(f"dd[data-field='{name}']")
    for key, want in (("pushed", 40), ("delivered", 10), ("acked", 10), ("deadLettered", 0)):
        await expect(field(key)).to_have_text(text_of(want))
    lag = math.floor(max(p["maxLagMs"] for p in ops) / 1000 + 0.5)  # JS Math.round
    assert lag < 120  # the fixture's messages are minutes old at most
    await expect(field("lag")).to_have_text(f"{lag} s")
    await expect(page.locator("svg[data-chart='depth'] circle title").last).to_have_text(
        re.compile(rf"^depth {text_of(ops[-1]['depth'])} at "))

    # Dead letters: the payments queue dead-lettered three.
    await open_view(page, broker.url, analytics_route(window, queue=data.pay))
    await expect(field("deadLettered")).to_have_text("3")
    dead = page.locator("svg[data-chart='dlq'] circle title")
    await expect(dead.filter(has_text=re.compile(r"^dead-lettered 3 at "))).to_have_count(1)

    # Every queue: throughput, dead letters and latency per minute from the processes' rows.
    r = await api.get("/api/v1/analytics/worker-metrics", params=window)
    workers = r.json()
    points = workers["timeSeries"]
    assert workers["bucketMinutes"] == 1 and points
    assert workers["summary"]["totalPushMessages"] >= 40 + 6 + 3
    await open_view(page, broker.url, analytics_route(window))
    for chart in ("throughput", "dlq", "latency"):
        await expect(page.locator(f"svg[data-chart='{chart}']")).to_have_attribute(
            "data-points", str(len(points)))
    latency = page.locator("svg[data-chart='latency']").locator("xpath=..")
    await expect(latency.locator(".legend .key")).to_have_text(
        [f"{kind} {q}" for kind in ("push", "pop", "ack") for q in ("p50", "p99")])
    timed = [p for p in points if p["latency"]["push"]["count"]]
    assert timed  # the fixture's pushes were timed
    await expect(latency.locator("circle title").filter(
        has_text=re.compile(r"^push p99 [\d.,]+ at "))).to_have_count(len(timed))
    await expect(field("pushP99")).to_have_text(re.compile(r"^[\d.,]+ ms$"))

    # A preset window, as the view opens by default: the last hour up to now.
    await open_view(page, broker.url, "analytics?window=6h")
    await expect(page.locator("[data-window]")).to_have_attribute("data-window", "6h")
    await expect(page.locator("select[name='window']")).to_have_value("6h")
    await expect(page.locator("svg[data-chart='throughput']")).to_be_visible()
    await open_view(page, broker.url, analytics_route(window))
    await snap(page, "analytics")


async def test_views_refresh_on_their_own(browser: Any, broker: BrokerProcess,
                                          api: httpx.AsyncClient, data: Data) -> None:
    context = await browser.new_context()
    await context.add_init_script("sessionStorage.setItem('queen.dashboard.refreshMs', '700')")
    page = await context.new_page()
    try:
        await open_view(page, broker.url, f"queue/{data.orders}")
        cell = row(page, "p2").first.locator("[data-field='lastOffset']")
        await expect(cell).to_have_text("9")
        await push(api, [{"queue": data.orders, "partition": "p2", "payload": n}
                         for n in range(3)])
        await expect(cell).to_have_text("12")  # no navigation: the view refreshed itself
        # Unticking "live" stops the refreshes. The API answers slowly here, so the box is
        # unticked while a refresh is in flight: that one may finish, no new one starts.
        async def slowly(route: Any) -> None:
            await asyncio.sleep(0.4)
            await route.continue_()
        await page.route("**/api/v1/**", slowly)
        await page.wait_for_selector("#view[data-loading]")
        await page.uncheck("#live")
        await page.wait_for_selector("#view:not([data-loading])")
        loads = await page.locator("#view").get_attribute("data-loads")
        await page.wait_for_timeout(1600)
        assert await page.locator("#view").get_attribute("data-loads") == loads
        assert await page.locator("#view[data-loading]").count() == 0
    finally:
        await context.close()


async def test_a_load_for_a_view_left_counts_for_nothing_on_the_next(
        browser: Any, broker: BrokerProcess) -> None:
    """The view's "loading" mark and its count of loads are the current view's: a load
    still in flight for the view the user left, ending first, neither clears the mark nor
    counts as the new view's load."""
    context = await browser.new_context()
    await context.add_init_script(
        "sessionStorage.setItem('queen.dashboard.refreshMs', '600000')")
    page = await context.new_page()
    try:
        await open_view(page, broker.url, "")

        # The view left answers after 0.3 s, the next one after 1.5 s.
        async def slowly(route: Any) -> None:
            await asyncio.sleep(0.3 if "kv-namespaces" in route.request.url else 1.5)
            await route.continue_()
        await page.route("**/api/v1/**", slowly)
        await page.goto(f"{broker.url}/#/kv")
        await page.wait_for_selector("#view[data-view='kv'][data-loading]")
        await page.goto(f"{broker.url}/#/timers")
        await page.wait_for_selector("#view[data-view='timers']")
        await page.wait_for_selector("#view:not([data-loading])")
        # Idle only once the timers view's own load has ended: its content is there, and
        # that load is the one counted.
        assert await page.locator("#view .body > *").count() > 0
        assert await page.locator("#view").get_attribute("data-loads") == "1"
    finally:
        await context.close()


# --- auth on ---------------------------------------------------------------------------------

async def test_with_auth_on_the_page_asks_for_a_token_and_offers_what_the_role_may_do(
        browser: Any, auth_broker: BrokerProcess, data: Data) -> None:
    signer = Signer(AUTH_SECRET, "HS256")
    context = await browser.new_context(viewport={"width": 1280, "height": 860})
    page = await context.new_page()
    try:
        await page.goto(f"{auth_broker.url}/#/groups?search={data.prefix}")
        form = page.locator("#token-form")
        await expect(form).to_be_visible()
        await snap(page, "token")
        await page.fill("#token-input", "not-a-token")
        await page.click("#token-form button[type='submit']")
        await expect(page.locator("[data-error='token']")).to_contain_text("refused")

        async def use(role: str) -> None:
            if await page.locator("[data-action='forget-token']").count():
                await page.click("[data-action='forget-token']")
            await page.fill("#token-input", signer.token(f"{role}-user", role=role))
            await page.click("#token-form button[type='submit']")
            await expect(page.locator("#who")).to_contain_text(f"{role}-user · {role}")
            await expect(row(page, f"billing/{data.orders}")).to_be_visible()

        actions = row(page, f"billing/{data.orders}").locator("[data-action]")
        await use("read-only")
        await expect(actions).to_have_count(0)
        await page.goto(f"{auth_broker.url}/#/dlq?queue={data.pay}")
        await expect(page.locator("td[data-field='transactionId']").first).to_be_visible()
        await expect(page.locator("[data-action='replay']")).to_have_count(0)
        # The token lives in this tab's sessionStorage, nowhere else.
        assert await page.evaluate("() => localStorage.length") == 0
        assert (await page.evaluate("() => sessionStorage.getItem('queen.dashboard.token')")
                ).count(".") == 2
        await page.goto(f"{auth_broker.url}/#/groups?search={data.prefix}")
        await use("read-write")
        await expect(actions).to_have_text(["Seek to end", "Seek to time…"])
        await use("admin")
        await expect(actions).to_have_text(["Seek to end", "Seek to time…", "Delete"])
    finally:
        await context.close()
