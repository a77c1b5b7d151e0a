"""`/metrics` and `/metrics/prometheus` count KV ops and lock grants/refusals (extensions
§14, §15), summed over both web workers."""

from __future__ import annotations

import asyncio
import uuid

import httpx

from tests.integration.test_observability import scrape, value
from tests.support import wait_for

_FIGURES = {"kv_ops": ("kv", "ops"), "kv_writes": ("kv", "writes"),
            "kv_reads": ("kv", "reads"), "lock_grants": ("locks", "grants"),
            "lock_refusals": ("locks", "refusals")}


async def _figures(http: httpx.AsyncClient) -> tuple[dict[str, float], dict[str, float]]:
    answer = (await http.get("/metrics")).json()
    sample = await scrape(http)
    as_json = {name: answer[group][field] for name, (group, field) in _FIGURES.items()}
    as_text = {name: value(sample, f"queen_cluster_{name}_total") for name in _FIGURES}
    return as_json, as_text


async def _settled(http: httpx.AsyncClient) -> tuple[dict[str, float], dict[str, float]]:
    """The figures once two reads more than two flush intervals apart agree: the session's
    broker flushes its workers' counts every second, and KV calls of the tests before this
    one may not have reached the database yet (CI saw them land inside this test's diff)."""
    last = await _figures(http)
    for _ in range(20):
        await asyncio.sleep(2.5)
        now = await _figures(http)
        if now == last:
            return now
        last = now
    raise AssertionError("the KV counters never settled")


async def test_kv_ops_and_lock_verdicts_are_counted(http: httpx.AsyncClient) -> None:
    ns, name = "m-" + uuid.uuid4().hex[:10], "m-" + uuid.uuid4().hex[:10]
    before, before_text = await _settled(http)
    r = await http.post("/api/v1/kv", json=[
        {"op": "put", "ns": ns, "key": "a", "value": 1, "forever": True},
        {"op": "incr", "ns": ns, "key": "b", "delta": 1, "forever": True},
        {"op": "get", "ns": ns, "key": "a"}])
    assert r.status_code == 200
    for owner in ("first", "second"):  # one grant, one refusal: one putIfAbsent each
        r = await http.post("/api/v1/locks", json=[
            {"op": "acquire", "name": name, "ttlSeconds": 30, "owner": owner}])
        assert r.status_code == 200
    expected = {"kv_ops": 5, "kv_writes": 3, "kv_reads": 1, "lock_grants": 1,
                "lock_refusals": 1}

    async def counted() -> bool:
        after, after_text = await _figures(http)
        return ({k: after[k] - before[k] for k in after} == expected
                and {k: after_text[k] - before_text[k] for k in after_text} == expected)

    await wait_for(counted, timeout=30, interval=0.5)
