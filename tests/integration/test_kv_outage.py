"""The KV and lock routes while PostgreSQL is down and after it restarts (extensions §14.5,
shared rules): 503 `kv_unavailable` with Retry-After, nothing half-written, and versions that
keep growing over the restart."""

from __future__ import annotations

import signal

import httpx

# The outage module's own PostgreSQL and broker (a module-scoped fixture: one for this
# module), restartable.
from tests.integration.test_outage_and_restart import Cluster, cluster  # noqa: F401
from tests.support import wait_for


async def test_database_down_answers_kv_unavailable_and_versions_survive_a_restart(
        cluster: Cluster) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as http:
        put = {"op": "put", "ns": "outage", "key": "k", "value": 1, "forever": True}
        first = (await http.post("/api/v1/kv", json=[put])).json()["results"][0]["version"]
        cluster.stop_pg(signal.SIGKILL)
        for path, body in (("/api/v1/kv", [put]),
                           ("/api/v1/locks", [{"op": "acquire", "name": "n",
                                               "ttlSeconds": 5}])):
            r = await http.post(path, json=body)
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "1"
            answer = r.json()
            assert (answer["error"], answer["reason"]) == ("kv_unavailable", "kv_unavailable")
        r = await http.get("/api/v1/kv/outage/k")
        assert r.status_code == 503 and r.json()["error"] == "kv_unavailable"
        cluster.start_pg()

        async def answered() -> httpx.Response | None:
            r = await http.post("/api/v1/kv", json=[{**put, "value": 2}])
            return r if r.status_code == 200 else None

        again = (await wait_for(answered, timeout=60, interval=0.5)).json()["results"][0]
        assert again["applied"] is True and again["version"] > first
        got = (await http.get("/api/v1/kv/outage/k")).json()
        assert (got["value"], got["version"]) == (2, again["version"])
